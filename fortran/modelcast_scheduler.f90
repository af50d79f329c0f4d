! modelcast_scheduler: the online publish scheduler for a Fortran trainer (the C ABI's
! mc_scheduler_*, modelcast_scheduler.h). Feed it every logged loss with mc_scheduler_observe,
! then ask mc_scheduler_should_publish at that step; publish when it says so. Re-exported by
! the `modelcast` module; statuses and mc_last_error as there.
module modelcast_scheduler
  use, intrinsic :: iso_c_binding
  use modelcast_c
  use modelcast_support
  implicit none
  private
  public :: mc_scheduler, mc_scheduler_create, mc_scheduler_destroy, mc_scheduler_observe, &
      mc_scheduler_should_publish, mc_scheduler_set_costs, mc_scheduler_wait_for_background
  public :: MC_SCHEDULER_INLINE, MC_SCHEDULER_REFITS_IN_BACKGROUND, MC_SCHEDULER_BACKGROUND

  type :: mc_scheduler
    type(c_ptr) :: handle = c_null_ptr
  end type

contains

  ! total_steps: planned length of the run (> 0); warmup_step: inference starts when it completes
  ! (default 0); publish_cost_s (c) and update_latency_s (d), >= 0, default 0; request_rate
  ! (default 1); window_s (default: forecast end minus warm-up time); max_slowdown_s (default none);
  ! work_mode: MC_SCHEDULER_INLINE (default), MC_SCHEDULER_REFITS_IN_BACKGROUND or
  ! MC_SCHEDULER_BACKGROUND (forecasts and plans on a worker thread: the trainer's call costs
  ! microseconds, and may act one evaluation late); loss_floor: the lowest loss the run can reach
  ! (default: 0 when every loss is positive, none otherwise; none: -infinity, from
  ! ieee_arithmetic's ieee_value(x, ieee_negative_inf)).
  integer function mc_scheduler_create(scheduler, total_steps, warmup_step, publish_cost_s, update_latency_s, &
                                       request_rate, window_s, max_slowdown_s, work_mode, loss_floor) result(status)
    type(mc_scheduler), intent(inout) :: scheduler
    integer(c_int64_t), intent(in) :: total_steps
    integer(c_int64_t), intent(in), optional :: warmup_step
    real(c_double), intent(in), optional :: publish_cost_s, update_latency_s, request_rate, window_s, max_slowdown_s
    integer(c_int), intent(in), optional :: work_mode
    real(c_double), intent(in), optional :: loss_floor
    type(mc_scheduler_options_t) :: options
    if (c_associated(scheduler%handle)) then
      status = module_failure(MC_ERR_STATE, "mc_scheduler_create: the scheduler variable holds a live scheduler; "// &
          "mc_scheduler_destroy it first")
      return
    end if
    call mc_scheduler_options_init_c(options)
    if (options%struct_size /= c_sizeof(options)) then
      status = struct_mismatch("mc_scheduler_create", options%struct_size, c_sizeof(options))
      return
    end if
    options%total_steps = total_steps
    if (present(warmup_step)) options%warmup_step = warmup_step
    if (present(publish_cost_s)) options%publish_cost_s = publish_cost_s
    if (present(update_latency_s)) options%update_latency_s = update_latency_s
    if (present(request_rate)) options%request_rate = request_rate
    if (present(window_s)) options%window_s = window_s
    if (present(max_slowdown_s)) options%max_slowdown_s = max_slowdown_s
    if (present(work_mode)) options%work_mode = work_mode
    if (present(loss_floor)) options%loss_floor = loss_floor
    status = from_c(mc_scheduler_create_c(options, scheduler%handle))
  end function

  subroutine mc_scheduler_destroy(scheduler)
    type(mc_scheduler), intent(inout) :: scheduler
    call mc_scheduler_destroy_c(scheduler%handle)
    scheduler%handle = c_null_ptr
  end subroutine

  ! One logged loss; wall_time_s is the trainer's clock, stalls of earlier publishes included.
  integer function mc_scheduler_observe(scheduler, step, loss, wall_time_s) result(status)
    type(mc_scheduler), intent(in) :: scheduler
    integer(c_int64_t), intent(in) :: step
    real(c_double), intent(in) :: loss, wall_time_s
    status = from_c(mc_scheduler_observe_c(scheduler%handle, step, loss, wall_time_s))
  end function

  ! publish = .true. when publishing now, at the latest observed step, is the best next move.
  integer function mc_scheduler_should_publish(scheduler, step, publish) result(status)
    type(mc_scheduler), intent(in) :: scheduler
    integer(c_int64_t), intent(in) :: step
    logical, intent(out) :: publish
    integer(c_int) :: answer
    status = from_c(mc_scheduler_should_publish_c(scheduler%handle, step, answer))
    publish = answer /= 0
  end function

  ! Waits for the worker threads to finish what the last decision gave them (reproducible replays).
  integer function mc_scheduler_wait_for_background(scheduler) result(status)
    type(mc_scheduler), intent(in) :: scheduler
    status = from_c(mc_scheduler_wait_for_background_c(scheduler%handle))
  end function

  ! Measured costs (e.g. the publish's stall) replace c and d.
  integer function mc_scheduler_set_costs(scheduler, publish_cost_s, update_latency_s) result(status)
    type(mc_scheduler), intent(in) :: scheduler
    real(c_double), intent(in) :: publish_cost_s, update_latency_s
    status = from_c(mc_scheduler_set_costs_c(scheduler%handle, publish_cost_s, update_latency_s))
  end function
end module modelcast_scheduler
