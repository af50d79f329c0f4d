/* modelcast "hello world" in C: one process with a producer (the trainer) and a consumer (the
 * inference side), through the C ABI in modelcast/modelcast.h. The producer publishes three
 * versions of a tiny model; the consumer waits for each one and checks every value.
 * Exits 1 if anything fails or differs.
 *
 * Run with UCX_NET_DEVICES=lo so that UCX stays on loopback. */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "modelcast/modelcast.h"

/* Prints the failing call and modelcast's explanation, then jumps to cleanup. */
#define CHECK(call)                                                                              \
  do {                                                                                           \
    mc_status check_status_ = (call);                                                            \
    if (check_status_ != MC_OK) {                                                                \
      fprintf(stderr, "%s failed: %s: %s\n", #call, mc_status_name(check_status_), mc_last_error()); \
      goto done;                                                                                 \
    }                                                                                            \
  } while (0)

int main(void) {
  int exit_code = 1;
  mc_producer_t* producer = NULL;
  mc_consumer_t* consumer = NULL;
  mc_view_t* view = NULL;

  /* The trainer's tensors: modelcast reads them during publish, so they must stay put. */
  float weights[4 * 3];
  int64_t counts[5];
  const int64_t weights_shape[2] = {4, 3};
  const int64_t counts_shape[1] = {5};

  mc_producer_options popts;
  mc_producer_options_init(&popts);
  popts.model_name = "hello";
  popts.control_endpoint = "tcp://127.0.0.1:0"; /* port 0: pick a free one */
  CHECK(mc_producer_create(&popts, &producer));
  CHECK(mc_producer_register_tensor(producer, "layer0.weight", MC_DTYPE_F32, 2, weights_shape, weights));
  CHECK(mc_producer_register_tensor(producer, "counts", MC_DTYPE_I64, 1, counts_shape, counts));

  mc_consumer_options copts;
  mc_consumer_options_init(&copts);
  copts.producer_endpoint = mc_producer_endpoint(producer); /* the port actually bound */
  copts.model_name = "hello";
  copts.consumer_name = "example-c-consumer";
  CHECK(mc_consumer_create(&copts, &consumer));

  for (int round = 1; round <= 3; ++round) {
    /* "Training" changes the weights, then the trainer publishes them. */
    for (size_t i = 0; i < 12; ++i) weights[i] = (float)(round * 100 + (int)i) * 0.5f;
    for (size_t i = 0; i < 5; ++i) counts[i] = round * 1000 + (int64_t)i;
    char round_text[16];
    snprintf(round_text, sizeof round_text, "%d", round);
    const char* keys[1] = {"round"};
    const char* values[1] = {round_text};
    mc_publish_result published;
    CHECK(mc_producer_publish(producer, round * 10, keys, values, 1, &published));
    printf("published version %" PRIu64 " (step %" PRId64 ", %" PRIu64 " bytes, trainer stalled %.3f ms)\n",
           published.version, published.step, published.bytes, (double)published.stall_ns / 1e6);

    /* The consumer side: wait (bounded) for this version and read it through a view, which
     * stays valid and unchanged until mc_view_release. */
    CHECK(mc_consumer_wait_for_version(consumer, published.version, 30000, &view));
    mc_tensor_info w, c;
    CHECK(mc_view_find_tensor(view, "layer0.weight", &w));
    CHECK(mc_view_find_tensor(view, "counts", &c));
    const char* round_seen = mc_view_metadata_get(view, "round");
    const float* wv = (const float*)w.data;
    const int64_t* cv = (const int64_t*)c.data;
    printf("consumer has version %" PRIu64 " (step %" PRId64 ", round=%s): layer0.weight[0..2] = %g %g %g, "
           "counts[4] = %" PRId64 "\n",
           mc_view_version(view), mc_view_step(view), round_seen ? round_seen : "(none)", (double)wv[0],
           (double)wv[1], (double)wv[2], cv[4]);

    int same = mc_view_version(view) == published.version && mc_view_step(view) == round * 10 &&
               mc_view_tensor_count(view) == 2 && round_seen != NULL && strcmp(round_seen, round_text) == 0 &&
               w.dtype == MC_DTYPE_F32 && w.ndim == 2 && w.shape[0] == 4 && w.shape[1] == 3 &&
               w.size_bytes == sizeof weights && memcmp(w.data, weights, sizeof weights) == 0 &&
               c.dtype == MC_DTYPE_I64 && c.ndim == 1 && c.shape[0] == 5 && c.size_bytes == sizeof counts &&
               memcmp(c.data, counts, sizeof counts) == 0;
    mc_view_release(view);
    view = NULL;
    if (!same) {
      fprintf(stderr, "version %" PRIu64 " differs from what was published\n", published.version);
      goto done;
    }
  }
  printf("ok: 3 versions received intact\n");
  exit_code = 0;

done:
  mc_view_release(view); /* all three accept NULL */
  mc_consumer_destroy(consumer);
  mc_producer_destroy(producer);
  return exit_code;
}
