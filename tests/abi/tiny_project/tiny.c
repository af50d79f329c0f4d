/* A C program built against an installed modelcast: one producer and one consumer in this
 * process exchange a 1000-element f32 tensor over loopback, and every value is checked. */
#include <stdio.h>

#include <modelcast/modelcast.h>
#include <modelcast/version.h>

#define N 1000

static int check(mc_status status, const char* what) {
  if (status != MC_OK) fprintf(stderr, "tiny: %s failed: %s (%s)\n", what, mc_status_name(status), mc_last_error());
  return status == MC_OK;
}

int main(void) {
  static float weights[N];
  for (int i = 0; i < N; ++i) weights[i] = 0.5f * (float)i - 7.0f;
  mc_producer_options popts;
  mc_producer_options_init(&popts);
  popts.model_name = "tiny";
  mc_producer_t* producer = NULL;
  if (!check(mc_producer_create(&popts, &producer), "mc_producer_create")) return 1;
  const int64_t shape[1] = {N};
  int ok = check(mc_producer_register_tensor(producer, "w", MC_DTYPE_F32, 1, shape, weights), "register");

  mc_consumer_options copts;
  mc_consumer_options_init(&copts);
  copts.model_name = "tiny";
  copts.producer_endpoint = mc_producer_endpoint(producer);
  mc_consumer_t* consumer = NULL;
  ok = ok && check(mc_consumer_create(&copts, &consumer), "mc_consumer_create");
  ok = ok && check(mc_producer_wait_for_consumers(producer, 1, 30000), "wait_for_consumers");
  ok = ok && check(mc_producer_publish(producer, 1, NULL, NULL, 0, NULL), "publish");
  mc_view_t* view = NULL;
  ok = ok && check(mc_consumer_wait_for_version(consumer, 1, 30000, &view), "wait_for_version");
  mc_tensor_info info;
  ok = ok && check(mc_view_find_tensor(view, "w", &info), "find_tensor");
  if (ok) {
    const float* got = (const float*)info.data;
    for (int i = 0; i < N && ok; ++i) {
      if (got[i] != weights[i]) {
        fprintf(stderr, "tiny: element %d is %g, published %g\n", i, (double)got[i], (double)weights[i]);
        ok = 0;
      }
    }
  }
  mc_view_release(view);
  mc_consumer_destroy(consumer);
  mc_producer_destroy(producer);
  if (ok) printf("tiny: ok, %d values intact (built against modelcast %s)\n", N, MODELCAST_VERSION_STRING);
  return ok ? 0 : 1;
}
