/* The C ABI's later additions, exercised from C (compiled as C11): the version query, the log
 * hook and level, the consumer's update and error callbacks, and the online scheduler.
 * A plain program: exits non-zero naming the first check that failed. Loopback only. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "modelcast/modelcast.h"
#include "modelcast/version.h"

static int failures = 0;
#define CHECK(cond)                                                                  \
  do {                                                                               \
    if (!(cond)) {                                                                   \
      fprintf(stderr, "%s:%d: CHECK failed: %s (last error: %s)\n", __FILE__, __LINE__, #cond, \
              mc_last_error());                                                      \
      ++failures;                                                                    \
    }                                                                                \
  } while (0)

/* ---- an event the service thread signals and the test waits for, bounded -------------- */
typedef struct {
  pthread_mutex_t mutex;
  pthread_cond_t cond;
  int count;
  uint64_t last_version;
  int64_t last_step;
  mc_status last_status;
  char last_text[512];
  char plaintext_text[512];
  int last_level;
} event_t;

static void event_init(event_t* e) {
  memset(e, 0, sizeof *e);
  pthread_mutex_init(&e->mutex, NULL);
  pthread_cond_init(&e->cond, NULL);
}

/* Waits until e->count >= n or 30 s pass; returns whether it got there. */
static int event_wait(event_t* e, int n) {
  struct timespec deadline;
  clock_gettime(CLOCK_REALTIME, &deadline);
  deadline.tv_sec += 30;
  pthread_mutex_lock(&e->mutex);
  int rc = 0;
  while (e->count < n && rc == 0) rc = pthread_cond_timedwait(&e->cond, &e->mutex, &deadline);
  int reached = e->count >= n;
  pthread_mutex_unlock(&e->mutex);
  return reached;
}

/* ---- version ------------------------------------------------------------------------ */
static void test_version(void) {
  int major = -1, minor = -1, patch = -1, abi_major = -1, abi_minor = -1;
  mc_version(&major, &minor, &patch, &abi_major, &abi_minor);
  CHECK(strcmp(mc_version_string(), MODELCAST_VERSION_STRING) == 0);
  CHECK(major == MODELCAST_VERSION_MAJOR && minor == MODELCAST_VERSION_MINOR && patch == MODELCAST_VERSION_PATCH);
  char abi[32];
  if (abi_major == 0) snprintf(abi, sizeof abi, "%d.%d", abi_major, abi_minor);
  else snprintf(abi, sizeof abi, "%d", abi_major);
  CHECK(strcmp(abi, MODELCAST_ABI_VERSION_STRING) == 0);
  mc_version(NULL, NULL, NULL, NULL, NULL); /* every pointer may be NULL */
}

/* ---- log hook ----------------------------------------------------------------------- */
static void on_log(mc_log_level level, const char* component, const char* message, void* user_data) {
  event_t* e = (event_t*)user_data;
  pthread_mutex_lock(&e->mutex);
  if (strcmp(component, "modelcast.producer") == 0 && strstr(message, "plaintext control plane on ") != NULL) {
    snprintf(e->plaintext_text, sizeof e->plaintext_text, "%s", message);
  }
  if (strcmp(component, "modelcast.producer") == 0 && strstr(message, "serving on") != NULL) {
    ++e->count;
    e->last_level = (int)level;
    snprintf(e->last_text, sizeof e->last_text, "%s", message);
  }
  pthread_cond_broadcast(&e->cond);
  pthread_mutex_unlock(&e->mutex);
}

static mc_producer_t* make_producer(const char* name) {
  mc_producer_options options;
  mc_producer_options_init(&options);
  options.model_name = name;
  mc_producer_t* producer = NULL;
  CHECK(mc_producer_create(&options, &producer) == MC_OK);
  return producer;
}

static void test_log_hook(void) {
  event_t seen;
  event_init(&seen);
  CHECK(mc_set_log_handler(on_log, &seen) == MC_OK);
  CHECK(mc_set_log_level(MC_LOG_INFO) == MC_OK);
  mc_producer_t* producer = make_producer("logged");
  /* The producer logs its endpoint at info level on creation, through the handler. */
  CHECK(event_wait(&seen, 1));
  CHECK(seen.last_level == MC_LOG_INFO);
  CHECK(strstr(seen.last_text, mc_producer_endpoint(producer)) != NULL);
  /* The plaintext warning names the endpoint bound, not the configured port 0. */
  CHECK(strstr(seen.plaintext_text, mc_producer_endpoint(producer)) != NULL);
  mc_producer_destroy(producer);

  /* Above the message's level nothing reaches the handler. */
  CHECK(mc_set_log_level(MC_LOG_ERROR) == MC_OK);
  producer = make_producer("quiet");
  CHECK(seen.count == 1);
  mc_producer_destroy(producer);

  CHECK(mc_set_log_level((mc_log_level)7) == MC_ERR_INVALID_ARGUMENT);
  CHECK(strstr(mc_last_error(), "log level 7") != NULL);
  CHECK(mc_set_log_level(MC_LOG_INFO) == MC_OK);
  CHECK(mc_set_log_handler(NULL, NULL) == MC_OK); /* back to stderr: the handler sees no more */
  producer = make_producer("stderr");
  CHECK(seen.count == 1);
  mc_producer_destroy(producer);
}

/* ---- consumer callbacks ------------------------------------------------------------- */
static void on_update(const mc_view_t* view, void* user_data) {
  event_t* e = (event_t*)user_data;
  mc_tensor_info info;
  pthread_mutex_lock(&e->mutex);
  e->last_version = mc_view_version(view);
  e->last_step = mc_view_step(view);
  /* The view is usable during the call: the tensor's first value is the version times 10. */
  if (mc_view_find_tensor(view, "w", &info) == MC_OK && ((const float*)info.data)[0] == 10.0f * (float)e->last_version) {
    ++e->count;
  }
  pthread_cond_broadcast(&e->cond);
  pthread_mutex_unlock(&e->mutex);
}

static void on_error(mc_status status, const char* message, void* user_data) {
  event_t* e = (event_t*)user_data;
  pthread_mutex_lock(&e->mutex);
  ++e->count;
  e->last_status = status;
  snprintf(e->last_text, sizeof e->last_text, "%s", message);
  pthread_cond_broadcast(&e->cond);
  pthread_mutex_unlock(&e->mutex);
}

static void test_callbacks(void) {
  static float w[4];
  const int64_t shape[1] = {4};
  mc_producer_t* producer = make_producer("callbacks");
  CHECK(mc_producer_register_tensor(producer, "w", MC_DTYPE_F32, 1, shape, w) == MC_OK);

  event_t updates, errors;
  event_init(&updates);
  event_init(&errors);
  mc_consumer_options options;
  mc_consumer_options_init(&options);
  CHECK(options.on_update == NULL && options.on_error == NULL && options.callback_user_data == NULL);
  options.model_name = "callbacks";
  options.producer_endpoint = mc_producer_endpoint(producer);
  options.on_update = on_update;
  options.callback_user_data = &updates;
  mc_consumer_t* good = NULL;
  CHECK(mc_consumer_create(&options, &good) == MC_OK);

  /* A second consumer insists on another layout: every version is rejected, through on_error. */
  mc_tensor_desc expected;
  mc_tensor_desc_init(&expected);
  const int64_t other_shape[1] = {5};
  expected.name = "w";
  expected.dtype = MC_DTYPE_F32;
  expected.ndim = 1;
  expected.shape = other_shape;
  options.expected_layout = &expected;
  options.expected_layout_count = 1;
  options.on_update = NULL;
  options.on_error = on_error;
  options.callback_user_data = &errors;
  mc_consumer_t* strict = NULL;
  CHECK(mc_consumer_create(&options, &strict) == MC_OK);

  CHECK(mc_producer_wait_for_consumers(producer, 2, 30000) == MC_OK);
  for (int v = 1; v <= 2; ++v) {
    w[0] = 10.0f * (float)v;
    CHECK(mc_producer_publish(producer, 100 * v, NULL, NULL, 0, NULL) == MC_OK);
    CHECK(event_wait(&updates, v));
    CHECK(updates.last_version == (uint64_t)v && updates.last_step == 100 * v);
  }
  CHECK(event_wait(&errors, 1));
  CHECK(errors.last_status == MC_ERR_LAYOUT_MISMATCH);
  CHECK(strstr(errors.last_text, "'w'") != NULL);
  mc_consumer_destroy(strict);
  mc_consumer_destroy(good);
  mc_producer_destroy(producer);
}

/* A producer of one 4-float tensor "w" of model `model`, and a consumer of it (with `on_update`
 * and `user_data` when not NULL): the setup of the cancellation and closing tests below. */
static float one_tensor[4];

static mc_producer_t* producer_of_w(const char* model) {
  const int64_t shape[1] = {4};
  mc_producer_t* producer = make_producer(model);
  CHECK(mc_producer_register_tensor(producer, "w", MC_DTYPE_F32, 1, shape, one_tensor) == MC_OK);
  return producer;
}

static mc_consumer_t* consumer_of(const mc_producer_t* producer, const char* model, mc_update_fn on_update,
                                  void* user_data) {
  mc_consumer_options options;
  mc_consumer_options_init(&options);
  options.model_name = model;
  options.producer_endpoint = mc_producer_endpoint(producer);
  options.on_update = on_update;
  options.callback_user_data = user_data;
  mc_consumer_t* consumer = NULL;
  CHECK(mc_consumer_create(&options, &consumer) == MC_OK);
  return consumer;
}

/* ---- a wait in a callback while the consumer is destroyed ------------------------------ */
/* The callback waits for a version that never comes: answered at once with MC_ERR_STATE ("would
 * block") until mc_consumer_destroy ends every wait; from then on the wait returns at once and
 * said MC_ERR_TIMEOUT ("did not arrive within 1000 ms", after none) instead of why. */
typedef struct {
  event_t started;
  mc_consumer_t* consumer;
  mc_status status;
  char text[512];
} closing_wait_t;

static void wait_while_closed(const mc_view_t* view, void* user_data) {
  closing_wait_t* w = (closing_wait_t*)user_data;
  (void)view;
  pthread_mutex_lock(&w->started.mutex);
  const int first = ++w->started.count == 1;
  mc_consumer_t* consumer = w->consumer;
  pthread_cond_broadcast(&w->started.cond);
  pthread_mutex_unlock(&w->started.mutex);
  if (!first) return;
  for (;;) {
    mc_view_t* none = NULL;
    const mc_status s = mc_consumer_wait_for_version(consumer, 1000000, 1000, &none);
    mc_view_release(none);
    if (s == MC_ERR_STATE && strstr(mc_last_error(), "would block") != NULL) continue; /* not closing yet */
    w->status = s;
    snprintf(w->text, sizeof w->text, "%s", mc_last_error());
    return;
  }
}

static void test_wait_in_a_callback_while_destroyed(void) {
  mc_producer_t* producer = producer_of_w("closing");
  static closing_wait_t waiting;
  event_init(&waiting.started);
  mc_consumer_t* consumer = consumer_of(producer, "closing", wait_while_closed, &waiting);
  pthread_mutex_lock(&waiting.started.mutex); /* the callback reads it on its own thread */
  waiting.consumer = consumer;
  pthread_mutex_unlock(&waiting.started.mutex);
  CHECK(mc_producer_wait_for_consumers(producer, 1, 30000) == MC_OK);
  CHECK(mc_producer_publish(producer, 1, NULL, NULL, 0, NULL) == MC_OK);
  CHECK(event_wait(&waiting.started, 1));
  mc_consumer_destroy(consumer); /* returns once the callback did */
  CHECK(waiting.status == MC_ERR_STATE);
  CHECK(strstr(waiting.text, "mc_consumer_destroy under way") != NULL);
  if (strstr(waiting.text, "mc_consumer_destroy under way") == NULL) fprintf(stderr, "  the wait said: %s\n", waiting.text);
  mc_producer_destroy(producer);
}

/* ---- a thread cancelled in a wait ----------------------------------------------------- */
/* pthread_cancel of a thread blocked in mc_consumer_wait_for_version: the forced unwind met the
 * ABI's exception boundary, which swallowed it, and the runtime aborted the process ("exception
 * not rethrown"). It now ends the thread, and the consumer goes on. */
typedef struct {
  mc_consumer_t* consumer;
  event_t entered;
} cancelled_wait_t;

static void* wait_until_cancelled(void* arg) {
  cancelled_wait_t* w = (cancelled_wait_t*)arg;
  pthread_mutex_lock(&w->entered.mutex);
  ++w->entered.count;
  pthread_cond_broadcast(&w->entered.cond);
  pthread_mutex_unlock(&w->entered.mutex);
  mc_view_t* view = NULL;
  mc_consumer_wait_for_version(w->consumer, 1000000, 600000, &view); /* cancelled in here */
  mc_view_release(view);
  return NULL;
}

static void test_a_thread_cancelled_in_a_wait(void) {
  mc_producer_t* producer = producer_of_w("cancelled");
  static cancelled_wait_t waiting;
  event_init(&waiting.entered);
  waiting.consumer = consumer_of(producer, "cancelled", NULL, NULL);
  pthread_t thread;
  CHECK(pthread_create(&thread, NULL, wait_until_cancelled, &waiting) == 0);
  CHECK(event_wait(&waiting.entered, 1));
  CHECK(pthread_cancel(thread) == 0);
  void* result = NULL;
  CHECK(pthread_join(thread, &result) == 0);
  CHECK(result == PTHREAD_CANCELED);
  /* The consumer is whole: versions arrive, and waits work. */
  CHECK(mc_producer_wait_for_consumers(producer, 1, 30000) == MC_OK);
  CHECK(mc_producer_publish(producer, 1, NULL, NULL, 0, NULL) == MC_OK);
  mc_view_t* view = NULL;
  CHECK(mc_consumer_wait_for_version(waiting.consumer, 1, 30000, &view) == MC_OK);
  mc_view_release(view);
  mc_consumer_destroy(waiting.consumer);
  mc_producer_destroy(producer);
}

/* A cancel pending when the last view of a consumer already destroyed is released: the release
 * waits for the transport's thread (a cancellation point inside a destructor), and the process
 * aborted. The cancel now acts once the release has returned. */
static int released_before_cancel = 0;

static void* release_with_a_cancel_pending(void* arg) {
  int before = 0;
  pthread_setcancelstate(PTHREAD_CANCEL_DISABLE, &before);
  pthread_cancel(pthread_self()); /* pending until enabled, then at a cancellation point */
  pthread_setcancelstate(PTHREAD_CANCEL_ENABLE, &before);
  mc_view_release((mc_view_t*)arg);
  released_before_cancel = 1; /* read by the joining thread only */
  pthread_testcancel();
  return NULL;
}

static void test_a_cancel_pending_in_a_release(void) {
  mc_producer_t* producer = producer_of_w("pending");
  mc_consumer_t* consumer = consumer_of(producer, "pending", NULL, NULL);
  CHECK(mc_producer_wait_for_consumers(producer, 1, 30000) == MC_OK);
  CHECK(mc_producer_publish(producer, 1, NULL, NULL, 0, NULL) == MC_OK);
  mc_view_t* view = NULL;
  CHECK(mc_consumer_wait_for_version(consumer, 1, 30000, &view) == MC_OK);
  mc_consumer_destroy(consumer); /* the view keeps its buffer, and the buffer its transport */
  pthread_t thread;
  CHECK(pthread_create(&thread, NULL, release_with_a_cancel_pending, view) == 0);
  void* result = NULL;
  CHECK(pthread_join(thread, &result) == 0);
  CHECK(result == PTHREAD_CANCELED);
  CHECK(released_before_cancel == 1);
  mc_producer_destroy(producer);
}

/* ---- online scheduler --------------------------------------------------------------- */
static void test_scheduler(void) {
  mc_scheduler_options options;
  mc_scheduler_options_init(&options);
  CHECK(options.request_rate == 1.0 && options.max_candidates > 0);
  mc_scheduler_t* scheduler = NULL;
  CHECK(mc_scheduler_create(&options, &scheduler) == MC_ERR_INVALID_ARGUMENT); /* total_steps unset */
  CHECK(strstr(mc_last_error(), "total_steps") != NULL && scheduler == NULL);
  options.total_steps = 3000;
  options.publish_cost_s = -1;
  CHECK(mc_scheduler_create(&options, &scheduler) == MC_ERR_INVALID_ARGUMENT);
  CHECK(strstr(mc_last_error(), "publish_cost_s") != NULL);
  options.publish_cost_s = 2;
  options.update_latency_s = 1;
  options.warmup_step = 500;
  CHECK(mc_scheduler_create(&options, &scheduler) == MC_OK);

  /* A loss curve that keeps falling fast: publishing after the warm-up pays off. */
  int decisions = 0, before_warmup = 0;
  int64_t decided[64];
  double stalls = 0;
  for (int64_t step = 100; step <= 3000; step += 100) {
    const double loss = 2.0 + 8.0 / (1.0 + (double)step / 300.0);
    CHECK(mc_scheduler_observe(scheduler, step, loss, 0.5 * (double)step + stalls) == MC_OK);
    int publish = -1;
    CHECK(mc_scheduler_should_publish(scheduler, step, &publish) == MC_OK);
    CHECK(publish == 0 || publish == 1);
    if (publish == 1) {
      if (step <= options.warmup_step) ++before_warmup;
      decided[decisions++] = step;
      stalls += options.publish_cost_s;
    }
  }
  CHECK(before_warmup == 0);
  CHECK(decisions > 0);
  CHECK(mc_scheduler_publish_count(scheduler) == (size_t)decisions);
  int64_t steps[64];
  size_t count = 0;
  CHECK(mc_scheduler_published_steps(scheduler, steps, 64, &count) == MC_OK);
  CHECK(count == (size_t)decisions);
  for (size_t i = 0; i < count && i < 64; ++i) CHECK(steps[i] == decided[i]);
  CHECK(mc_scheduler_published_steps(scheduler, NULL, 0, &count) == MC_OK && count == (size_t)decisions);

  CHECK(mc_scheduler_observe(scheduler, 3000, 2.0, 9999.0) == MC_ERR_INVALID_ARGUMENT); /* step not increasing */
  CHECK(strlen(mc_last_error()) > 0);
  CHECK(mc_scheduler_set_costs(scheduler, 1.0, -2.0) == MC_ERR_INVALID_ARGUMENT);
  CHECK(strstr(mc_last_error(), "update_latency_s") != NULL);
  CHECK(mc_scheduler_should_publish(NULL, 1, NULL) == MC_ERR_INVALID_ARGUMENT);
  mc_scheduler_destroy(scheduler);
  mc_scheduler_destroy(NULL);
}

int main(void) {
  setenv("UCX_NET_DEVICES", "lo", 0);
  test_version();
  test_log_hook();
  test_callbacks();
  test_wait_in_a_callback_while_destroyed();
  test_a_thread_cancelled_in_a_wait();
  test_a_cancel_pending_in_a_release();
  test_scheduler();
  if (failures == 0) printf("ok: C ABI additions behave as documented\n");
  return failures == 0 ? 0 : 1;
}
