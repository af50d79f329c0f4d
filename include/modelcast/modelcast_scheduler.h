/* modelcast C ABI: the online publish scheduler (C++: modelcast/predictor_online.h). Part of modelcast.h (which includes it); conventions as there. */
#ifndef MODELCAST_MODELCAST_SCHEDULER_H
#define MODELCAST_MODELCAST_SCHEDULER_H

#include "modelcast/modelcast.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- online publish scheduler (include/modelcast/predictor_online.h) ----------------------- */

/* Decides, inside the trainer, at each logged loss whether to publish now: it forecasts the
 * rest of the loss curve and weighs the training stall of a publish against the inference
 * loss saved by serving fresher weights (the model of modelcast-tune). */
typedef struct mc_scheduler mc_scheduler_t; /* opaque */

/* Where a decision's work runs (OnlineOptions::WorkMode documents each):
 * MC_SCHEDULER_INLINE: forecast and plan inside mc_scheduler_should_publish (deterministic);
 * MC_SCHEDULER_REFITS_IN_BACKGROUND: forecasts on a worker thread, plans inline;
 * MC_SCHEDULER_BACKGROUND: both on a worker thread; the trainer's call is a comparison with a
 * threshold prepared for it, or acts on the previous point's plan (one evaluation late). */
typedef enum mc_scheduler_work_mode {
  MC_SCHEDULER_INLINE = 0,
  MC_SCHEDULER_REFITS_IN_BACKGROUND = 1,
  MC_SCHEDULER_BACKGROUND = 2
} mc_scheduler_work_mode;

typedef struct mc_scheduler_options {
  size_t struct_size;        /* set by mc_scheduler_options_init; do not change */
  int64_t total_steps;       /* required, > 0: planned length of the run (last logged step) */
  int64_t warmup_step;       /* inference starts when this step completes (must be observed); default 0 */
  double publish_cost_s;     /* c: training stall per publish, >= 0; default 0 */
  double update_latency_s;   /* d: stall end until the version is servable, >= 0; default 0 */
  double request_rate;       /* r: inference requests per second, > 0; default 1 */
  double window_s;           /* inference window; NaN (default): forecast end minus warm-up time */
  double max_slowdown_s;     /* cap on publish_cost_s x publishes; default +infinity (no cap) */
  /* Refit policy, as OnlineOptions documents it: refit when the observed points grew by this
   * factor (default 0.5), at every point below refit_every_below points (default 24), or when
   * refit_band_points points left the forecast band (default 5; 0: off). */
  double refit_growth;
  int refit_band_points;
  int refit_every_below;
  int max_candidates;        /* publish candidates a plan weighs ("now" included), >= 2; default 160 */
  /* Since 0.8 (read only when struct_size covers it): an mc_scheduler_work_mode; default
   * MC_SCHEDULER_INLINE. */
  int work_mode;
  /* Since 0.9 (read only when struct_size covers it): the lowest loss the run can reach, as
   * ForecastOptions::loss_floor: NaN (default) for 0 when every loss is positive and none
   * otherwise; -INFINITY for none (a loss logged with a large constant in it); a finite value for
   * a known floor (minus the best return of a negated return), below which a loss is refused. */
  double loss_floor;
} mc_scheduler_options;

/* Fills `options` with the defaults above (and struct_size). No-op on NULL; thread-safe. */
MODELCAST_API void mc_scheduler_options_init(mc_scheduler_options* options);
/* As mc_producer_options_init (modelcast.h): the macro passes the caller's size. */
MODELCAST_API void mc_scheduler_options_init_sized(mc_scheduler_options* options, size_t size);
#define mc_scheduler_options_init(options) \
  mc_scheduler_options_init_sized((options), sizeof *(options) + 0 * sizeof((options)->struct_size))

/* *out gets a scheduler the caller owns (mc_scheduler_destroy); NULL on error.
 * Errors: MC_ERR_INVALID_ARGUMENT (NULL options/out, struct_size unset, total_steps <= 0,
 * negative or non-finite costs, request_rate <= 0, window_s not > 0 or infinite, max_slowdown_s
 * NaN or negative, max_candidates < 2), the message naming the field. Thread-safe. */
MODELCAST_API mc_status mc_scheduler_create(const mc_scheduler_options* options, mc_scheduler_t** out);

/* Frees the scheduler. NULL is a no-op. */
MODELCAST_API void mc_scheduler_destroy(mc_scheduler_t* scheduler);

/* Feeds one logged loss. wall_time_s is the trainer's clock, including the stalls of earlier
 * publishes. A scheduler is driven by one thread at a time (this and the calls below).
 * Errors: MC_ERR_INVALID_ARGUMENT (NULL scheduler, step not above the previous one, loss or
 * time not finite). */
MODELCAST_API mc_status mc_scheduler_observe(mc_scheduler_t* scheduler, int64_t step, double loss,
                                             double wall_time_s);

/* *publish = 1 when publishing now (at `step`, the latest observed step) is the first move of
 * the best plan for the rest of the run, else 0; a 1 is recorded as a publish. Always 0 up to
 * the warm-up step. May take tens of ms when it refits the forecast.
 * Errors: MC_ERR_INVALID_ARGUMENT (NULL scheduler/publish, step not the latest observed). */
MODELCAST_API mc_status mc_scheduler_should_publish(mc_scheduler_t* scheduler, int64_t step, int* publish);

/* Returns once the worker threads (MC_SCHEDULER_REFITS_IN_BACKGROUND, MC_SCHEDULER_BACKGROUND)
 * have finished the work the last decision gave them, so that the next decision is the one an
 * unhurried worker would give: for replays and tests that must be reproducible. No-op inline.
 * Errors: MC_ERR_INVALID_ARGUMENT (NULL scheduler); a failure of the worker's forecast or plan,
 * with its message. */
MODELCAST_API mc_status mc_scheduler_wait_for_background(mc_scheduler_t* scheduler);

/* Updates c and d from measured values (e.g. mc_publish_result.stall_ns).
 * Errors: MC_ERR_INVALID_ARGUMENT (NULL scheduler, negative or non-finite values). */
MODELCAST_API mc_status mc_scheduler_set_costs(mc_scheduler_t* scheduler, double publish_cost_s,
                                               double update_latency_s);

/* Number of publishes recommended so far; 0 for NULL. Never fails. */
MODELCAST_API size_t mc_scheduler_publish_count(const mc_scheduler_t* scheduler);

/* Copies up to `capacity` recommended publish steps, oldest first, into `steps` and their
 * total number into *count (which may exceed capacity). Errors: MC_ERR_INVALID_ARGUMENT (NULL
 * scheduler or count; NULL steps with capacity > 0). */
MODELCAST_API mc_status mc_scheduler_published_steps(const mc_scheduler_t* scheduler, int64_t* steps,
                                                     size_t capacity, size_t* count);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* MODELCAST_MODELCAST_SCHEDULER_H */
