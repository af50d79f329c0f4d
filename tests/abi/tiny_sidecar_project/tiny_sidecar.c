/* A sidecar client in C linked with libmodelcast_sidecar only (pkg-config modelcast-sidecar):
 * the helpers sidecar_c.h declares through modelcast.h link too. No daemon runs: the open fails,
 * and its status is named. Built and run by tests/abi/install_package_test.cmake. */
#include <modelcast/sidecar_c.h>
#include <stdio.h>
#include <string.h>

int main(int argc, char** argv) {
  mcs_client_t* client = NULL;
  mc_status status = mcs_client_open(argc > 1 ? argv[1] : "/nonexistent/attach.sock", "model", 0, &client);
  if (status == MC_OK || client != NULL) {
    printf("tiny_sidecar: opened a client with no daemon\n");
    return 1;
  }
  if (strcmp(mc_dtype_name(MC_DTYPE_BF16), "bf16") != 0 || mc_dtype_size(MC_DTYPE_BF16) != 2) {
    printf("tiny_sidecar: wrong dtype helpers\n");
    return 1;
  }
  printf("tiny_sidecar: ok, no daemon (%s)\n", mc_status_name(status));
  return 0;
}
