/* The trainer's publish pattern through the C ABI, for a C or Fortran simulation to copy: the
 * code owns its arrays, registers them once (no copy: modelcast reads them during publish), feeds
 * the online scheduler each evaluated loss and publishes when it says so. Training is replaced by
 * a trivial update rule (the weights relax towards a target), so the loss falls like a learning
 * curve without LibTorch.
 *
 * Usage: c_driver [STEPS]  (default 2000; evaluation every 10 steps, warm-up at 10 %).
 * Publishes on tcp://127.0.0.1 (a free port); run with UCX_NET_DEVICES=lo. No consumer is needed:
 * versions are kept for consumers that join. Exits 1 on any modelcast error. */
#define _POSIX_C_SOURCE 199309L /* clock_gettime, CLOCK_MONOTONIC */
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "modelcast/modelcast.h"

#define N_WEIGHTS 4096
#define EVAL_EVERY 10

#define CHECK(call)                                                                                  \
  do {                                                                                               \
    mc_status check_status_ = (call);                                                                \
    if (check_status_ != MC_OK) {                                                                    \
      fprintf(stderr, "%s failed: %s: %s\n", #call, mc_status_name(check_status_), mc_last_error()); \
      goto done;                                                                                     \
    }                                                                                                \
  } while (0)

static double now_s(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

int main(int argc, char** argv) {
  int exit_code = 1;
  char* end = NULL;
  if (argc == 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
    printf("Usage: c_driver [STEPS]\n  STEPS: training steps, a multiple of %d and at least %d (default 2000);\n"
           "  the loss is evaluated every %d steps and the warm-up is the first tenth.\n"
           "Publishes on tcp://127.0.0.1 (a free port); run with UCX_NET_DEVICES=lo.\n",
           EVAL_EVERY, 10 * EVAL_EVERY, EVAL_EVERY);
    return 0;
  }
  if (argc > 2) {
    fprintf(stderr, "c_driver: one argument (STEPS) at most, got %d; see c_driver --help\n", argc - 1);
    return 2;
  }
  long steps = argc > 1 ? strtol(argv[1], &end, 10) : 2000;
  /* "100x" was read as 100: the whole argument must be the number. */
  if ((argc > 1 && (end == argv[1] || *end != '\0')) || steps < 10 * EVAL_EVERY ||
      steps % EVAL_EVERY != 0) {
    fprintf(stderr, "c_driver: STEPS must be a multiple of %d and at least %d (got '%s')\n", EVAL_EVERY,
            10 * EVAL_EVERY, argc > 1 ? argv[1] : "");
    return 2;
  }
  const int64_t warmup = (steps / 10 / EVAL_EVERY) * EVAL_EVERY;
  mc_producer_t* producer = NULL;
  mc_scheduler_t* scheduler = NULL;

  /* The simulation's model: it stays allocated and unmoved while the producer lives. */
  static float weights[N_WEIGHTS];
  const int64_t shape[1] = {N_WEIGHTS};

  mc_producer_options popts;
  mc_producer_options_init(&popts);
  popts.model_name = "c_driver";
  CHECK(mc_producer_create(&popts, &producer));
  CHECK(mc_producer_register_tensor(producer, "weights", MC_DTYPE_F32, 1, shape, weights));
  CHECK(mc_producer_prepare(producer));

  mc_scheduler_options sopts;
  mc_scheduler_options_init(&sopts);
  sopts.total_steps = steps;
  sopts.warmup_step = warmup;
  sopts.request_rate = 100.0;
  CHECK(mc_scheduler_create(&sopts, &scheduler));

  size_t publishes = 0;
  const double start = now_s();
  for (int64_t step = 1; step <= steps; ++step) {
    /* "Training": relax towards target(i) = sin(i) at a rate that slows down, with noise-free
     * progress, so the loss keeps falling but ever more slowly. */
    const float rate = 0.005f / (1.0f + (float)step / 200.0f);
    for (int i = 0; i < N_WEIGHTS; ++i) weights[i] += rate * (sinf((float)i) - weights[i]);
    if (step % EVAL_EVERY != 0) continue;

    double loss = 0.0;
    for (int i = 0; i < N_WEIGHTS; ++i) loss += (weights[i] - sinf((float)i)) * (weights[i] - sinf((float)i));
    loss /= N_WEIGHTS;
    CHECK(mc_scheduler_observe(scheduler, step, loss, now_s() - start));
    int publish = 0;
    CHECK(mc_scheduler_should_publish(scheduler, step, &publish));
    if (step == warmup || publish) { /* the warm-up model is what serving starts on */
      char loss_text[32];
      snprintf(loss_text, sizeof loss_text, "%.6g", loss);
      const char* keys[1] = {"loss"};
      const char* values[1] = {loss_text};
      mc_publish_result result;
      CHECK(mc_producer_publish(producer, step, keys, values, 1, &result));
      CHECK(mc_scheduler_set_costs(scheduler, 1e-9 * (double)result.stall_ns, 0.0));
      ++publishes;
      printf("step %" PRId64 ": loss %.6g, published version %" PRIu64 " (stall %.3f ms)\n", step, loss,
             result.version, 1e-6 * (double)result.stall_ns);
    }
  }
  printf("c_driver: %zu publishes in %ld steps (scheduler recommended %zu)\n", publishes, steps,
         mc_scheduler_publish_count(scheduler));
  /* Beyond the warm-up publish, the scheduler should have found publishes worth their cost. */
  exit_code = mc_scheduler_publish_count(scheduler) > 0 ? 0 : 1;
done:
  mc_scheduler_destroy(scheduler);
  mc_producer_destroy(producer);
  return exit_code;
}
