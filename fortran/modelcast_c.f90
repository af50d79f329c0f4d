! modelcast_c: the C ABI (include/modelcast/modelcast.h) as ISO_C_BINDING declarations: the
! status and dtype constants, the structs modelcast reads or fills (field for field, in the C
! order), and the functions. The `modelcast` module builds its Fortran calls on these; use
! this module directly only for what `modelcast` does not wrap.
module modelcast_c
  use, intrinsic :: iso_c_binding
  implicit none

  ! mc_status
  integer(c_int), parameter, public :: MC_OK = 0, MC_ERR_INVALID_ARGUMENT = 1, MC_ERR_LAYOUT_MISMATCH = 2, &
      MC_ERR_PROTOCOL = 3, MC_ERR_TRANSPORT = 4, MC_ERR_TIMEOUT = 5, MC_ERR_INTEGRITY = 6, MC_ERR_STATE = 7, &
      MC_ERR_RESOURCE = 8, MC_ERR_AUTHENTICATION = 9, MC_ERR_UNKNOWN = 99
  ! mc_dtype
  integer(c_int), parameter, public :: MC_DTYPE_F64 = 0, MC_DTYPE_F32 = 1, MC_DTYPE_F16 = 2, MC_DTYPE_BF16 = 3, &
      MC_DTYPE_I64 = 4, MC_DTYPE_I32 = 5, MC_DTYPE_I16 = 6, MC_DTYPE_I8 = 7, MC_DTYPE_U8 = 8, MC_DTYPE_BOOL = 9, &
      MC_DTYPE_F8E4M3 = 10
  ! mc_scheduler_work_mode
  integer(c_int), parameter, public :: MC_SCHEDULER_INLINE = 0, MC_SCHEDULER_REFITS_IN_BACKGROUND = 1, &
      MC_SCHEDULER_BACKGROUND = 2

  type, bind(c), public :: mc_producer_options_t
    integer(c_size_t) :: struct_size
    type(c_ptr) :: model_name, control_endpoint
    integer(c_size_t) :: snapshot_slots
    integer(c_int) :: integrity
    integer(c_int64_t) :: first_version, lease_timeout_ms, heartbeat_interval_ms
    integer(c_size_t) :: transfer_chunk_bytes
    type(c_ptr) :: key_file, allowed_consumer_keys
    integer(c_size_t) :: allowed_consumer_key_count
    integer(c_int) :: allow_any_consumer, allow_plaintext_remote
    integer(c_size_t) :: max_consumers
    type(c_ptr) :: persist_directory
    integer(c_int64_t) :: persist_every
    integer(c_size_t) :: persist_keep
    integer(c_size_t) :: device_stage_bytes
    integer(c_size_t) :: relay_fanout
    integer(c_int32_t) :: rank
    integer(c_int32_t) :: rank_count
    type(c_ptr) :: rank_endpoints
    integer(c_size_t) :: rank_endpoint_count
    type(c_ptr) :: run_id
  end type

  type, bind(c), public :: mc_consumer_options_t
    integer(c_size_t) :: struct_size
    type(c_ptr) :: producer_endpoint, model_name, consumer_name
    integer(c_size_t) :: buffers
    type(c_ptr) :: caller_buffers, caller_buffer_sizes
    integer(c_size_t) :: caller_buffer_count
    type(c_ptr) :: expected_layout
    integer(c_size_t) :: expected_layout_count
    integer(c_int64_t) :: producer_timeout_ms
    type(c_ptr) :: producer_public_key, key_file
    integer(c_int) :: allow_plaintext_remote
    integer(c_int64_t) :: transfer_timeout_ms, max_model_bytes
    type(c_funptr) :: on_update, on_error
    type(c_ptr) :: callback_user_data
    integer(c_int) :: memory, device
    type(c_ptr) :: transports
    integer(c_size_t) :: transport_count
    type(c_ptr) :: path
    integer(c_int) :: serve_peers
    type(c_ptr) :: conversions
    integer(c_size_t) :: conversion_count
    type(c_ptr) :: group
    integer(c_int32_t) :: group_size
    type(c_ptr) :: wants
    integer(c_size_t) :: want_count
  end type

  ! uint64_t fields are integer(c_int64_t): Fortran has no unsigned kind (counts stay below 2^63).
  ! mc_group_state (where a group member stands); uint64_t as integer(c_int64_t).
  type, bind(c), public :: mc_group_state_t
    integer(c_int64_t) :: group_version, prepared_version
    integer(c_int) :: waiting
  end type

  ! mc_tensor_conversion (a tensor a consumer serves in another dtype; `to` is an MC_DTYPE_*).
  type, bind(c), public :: mc_tensor_conversion_t
    type(c_ptr) :: tensor
    integer(c_int) :: to
    integer(c_size_t) :: fp8_block
  end type

  ! mc_tensor_want (what a consumer keeps of a tensor); kind is one of C's MC_WANT_*, here
  ! MC_WANT_KIND_*: Fortran names are case-blind, and mc_want_nothing is the module's function.
  integer(c_int), parameter, public :: MC_WANT_KIND_WHOLE = 0, MC_WANT_KIND_SHARD = 1, &
      MC_WANT_KIND_BOXES = 2, MC_WANT_KIND_NOTHING = 3
  type, bind(c), public :: mc_tensor_want_t
    type(c_ptr) :: tensor
    integer(c_int) :: kind
    integer(c_size_t) :: dim, index, count, ndim, box_count
    type(c_ptr) :: box_offsets, box_extents
  end type

  type, bind(c), public :: mc_producer_stats_t
    integer(c_int64_t) :: latest_version, versions_published, deliveries, failed_deliveries, leases_expired, &
        bad_messages, bytes_sent, consumers, last_stall_ns
    character(kind=c_char) :: transport(32)
  end type

  type, bind(c), public :: mc_consumer_stats_t
    integer(c_int64_t) :: current_version, versions_installed, versions_rejected, transfers_aborted, &
        bad_messages, reconnects, bytes_received
    integer(c_int64_t) :: last_update_latency_ns, last_notify_latency_ns
    character(kind=c_char) :: last_error(256)
  end type

  type, bind(c), public :: mc_tensor_info_t
    type(c_ptr) :: name
    integer(c_int) :: dtype
    integer(c_size_t) :: ndim
    type(c_ptr) :: shape, data
    integer(c_size_t) :: size_bytes
    integer(c_int) :: memory, device
  end type

  type, bind(c), public :: mc_scheduler_options_t
    integer(c_size_t) :: struct_size
    integer(c_int64_t) :: total_steps, warmup_step
    real(c_double) :: publish_cost_s, update_latency_s, request_rate, window_s, max_slowdown_s, refit_growth
    integer(c_int) :: refit_band_points, refit_every_below, max_candidates, work_mode
    real(c_double) :: loss_floor
  end type

  ! mc_log_level
  integer(c_int), parameter, public :: MC_LOG_TRACE = 0, MC_LOG_DEBUG = 1, MC_LOG_INFO = 2, MC_LOG_WARN = 3, &
      MC_LOG_ERROR = 4, MC_LOG_CRITICAL = 5, MC_LOG_OFF = 6

  ! mc_log_fn: a log handler written in Fortran has this interface (strings are C strings).
  abstract interface
    subroutine mc_log_handler(level, component, message, user_data) bind(c)
      import :: c_int, c_ptr
      integer(c_int), value :: level
      type(c_ptr), value :: component, message, user_data
    end subroutine
  end interface

  type, bind(c), public :: mc_publish_result_t
    integer(c_int64_t) :: version, step, stall_ns, bytes
  end type

  interface
    pure function mc_last_error_c() bind(c, name="mc_last_error")
      import :: c_ptr
      type(c_ptr) :: mc_last_error_c
    end function
    function mc_set_last_error_c(status, text) bind(c, name="mc_set_last_error")
      import :: c_int, c_char
      integer(c_int), value :: status
      character(kind=c_char), intent(in) :: text(*)
      integer(c_int) :: mc_set_last_error_c
    end function
    function mc_dtype_name_c(dtype) bind(c, name="mc_dtype_name")
      import :: c_ptr, c_int
      integer(c_int), value :: dtype
      type(c_ptr) :: mc_dtype_name_c
    end function
    pure function mc_status_name_c(status) bind(c, name="mc_status_name")
      import :: c_ptr, c_int
      integer(c_int), value :: status
      type(c_ptr) :: mc_status_name_c
    end function
    pure function mc_version_string_c() bind(c, name="mc_version_string")
      import :: c_ptr
      type(c_ptr) :: mc_version_string_c
    end function
    function mc_load_public_key_c(path, public_key) bind(c, name="mc_load_public_key")
      import :: c_char, c_int
      character(kind=c_char), intent(in) :: path(*)
      character(kind=c_char), intent(out) :: public_key(41)
      integer(c_int) :: mc_load_public_key_c
    end function
    function mc_write_key_pair_c(path, overwrite, public_key) bind(c, name="mc_write_key_pair")
      import :: c_char, c_int
      character(kind=c_char), intent(in) :: path(*)
      integer(c_int), value :: overwrite
      character(kind=c_char), intent(out) :: public_key(41)
      integer(c_int) :: mc_write_key_pair_c
    end function
    function mc_dtype_size_c(dtype) bind(c, name="mc_dtype_size")
      import :: c_int, c_size_t
      integer(c_int), value :: dtype
      integer(c_size_t) :: mc_dtype_size_c
    end function
    subroutine mc_producer_options_init_c(options) bind(c, name="mc_producer_options_init")
      import :: mc_producer_options_t
      type(mc_producer_options_t), intent(out) :: options
    end subroutine
    function mc_producer_create_c(options, out) bind(c, name="mc_producer_create")
      import :: mc_producer_options_t, c_ptr, c_int
      type(mc_producer_options_t), intent(in) :: options
      type(c_ptr), intent(out) :: out
      integer(c_int) :: mc_producer_create_c
    end function
    subroutine mc_producer_destroy_c(producer) bind(c, name="mc_producer_destroy")
      import :: c_ptr
      type(c_ptr), value :: producer
    end subroutine
    pure function mc_producer_endpoint_c(producer) bind(c, name="mc_producer_endpoint")
      import :: c_ptr
      type(c_ptr), value :: producer
      type(c_ptr) :: mc_producer_endpoint_c
    end function
    function mc_producer_register_tensor_c(producer, name, dtype, ndim, shape, data) &
        bind(c, name="mc_producer_register_tensor")
      import :: c_ptr, c_int, c_size_t, c_int64_t
      type(c_ptr), value :: producer, name, data
      integer(c_int), value :: dtype
      integer(c_size_t), value :: ndim
      integer(c_int64_t), intent(in) :: shape(*)
      integer(c_int) :: mc_producer_register_tensor_c
    end function
    function mc_producer_register_piece_c(producer, name, dtype, ndim, shape, global_shape, global_offset, data) &
        bind(c, name="mc_producer_register_piece")
      import :: c_ptr, c_int, c_size_t, c_int64_t
      type(c_ptr), value :: producer, name, data
      integer(c_int), value :: dtype
      integer(c_size_t), value :: ndim
      integer(c_int64_t), intent(in) :: shape(*), global_shape(*), global_offset(*)
      integer(c_int) :: mc_producer_register_piece_c
    end function
    function mc_producer_publish_c(producer, step, keys, values, count, out) bind(c, name="mc_producer_publish")
      import :: c_ptr, c_int, c_size_t, c_int64_t, mc_publish_result_t
      type(c_ptr), value :: producer, keys, values
      integer(c_int64_t), value :: step
      integer(c_size_t), value :: count
      type(mc_publish_result_t), intent(out) :: out
      integer(c_int) :: mc_producer_publish_c
    end function
    function mc_producer_wait_for_consumers_c(producer, count, timeout_ms) &
        bind(c, name="mc_producer_wait_for_consumers")
      import :: c_ptr, c_int, c_size_t, c_int64_t
      type(c_ptr), value :: producer
      integer(c_size_t), value :: count
      integer(c_int64_t), value :: timeout_ms
      integer(c_int) :: mc_producer_wait_for_consumers_c
    end function
    function mc_producer_cancel_waits_c(producer) bind(c, name="mc_producer_cancel_waits")
      import :: c_ptr, c_int
      type(c_ptr), value :: producer
      integer(c_int) :: mc_producer_cancel_waits_c
    end function
    function mc_producer_get_persist_stats_c(producer, persisted, failures, skipped) &
        bind(c, name="mc_producer_get_persist_stats")
      import :: c_ptr, c_int, c_int64_t
      type(c_ptr), value :: producer
      integer(c_int64_t), intent(out) :: persisted, failures, skipped  ! uint64_t in C
      integer(c_int) :: mc_producer_get_persist_stats_c
    end function
    function mc_producer_get_refusal_stats_c(producer, refused_joins, refused_peers) &
        bind(c, name="mc_producer_get_refusal_stats")
      import :: c_ptr, c_int, c_int64_t
      type(c_ptr), value :: producer
      integer(c_int64_t), intent(out) :: refused_joins, refused_peers  ! uint64_t in C
      integer(c_int) :: mc_producer_get_refusal_stats_c
    end function
    function mc_producer_get_copy_stats_c(producer, snapshot_bytes_copied) bind(c, name="mc_producer_get_copy_stats")
      import :: c_ptr, c_int, c_int64_t
      type(c_ptr), value :: producer
      integer(c_int64_t), intent(out) :: snapshot_bytes_copied  ! uint64_t in C
      integer(c_int) :: mc_producer_get_copy_stats_c
    end function
    subroutine mc_consumer_options_init_c(options) bind(c, name="mc_consumer_options_init")
      import :: mc_consumer_options_t
      type(mc_consumer_options_t), intent(out) :: options
    end subroutine
    function mc_consumer_create_c(options, out) bind(c, name="mc_consumer_create")
      import :: mc_consumer_options_t, c_ptr, c_int
      type(mc_consumer_options_t), intent(in) :: options
      type(c_ptr), intent(out) :: out
      integer(c_int) :: mc_consumer_create_c
    end function
    subroutine mc_consumer_destroy_c(consumer) bind(c, name="mc_consumer_destroy")
      import :: c_ptr
      type(c_ptr), value :: consumer
    end subroutine
    function mc_consumer_acquire_c(consumer, out) bind(c, name="mc_consumer_acquire")
      import :: c_ptr, c_int
      type(c_ptr), value :: consumer
      type(c_ptr), intent(out) :: out
      integer(c_int) :: mc_consumer_acquire_c
    end function
    function mc_consumer_wait_for_version_c(consumer, version, timeout_ms, out) &
        bind(c, name="mc_consumer_wait_for_version")
      import :: c_ptr, c_int, c_int64_t
      type(c_ptr), value :: consumer
      integer(c_int64_t), value :: version, timeout_ms
      type(c_ptr), intent(out) :: out
      integer(c_int) :: mc_consumer_wait_for_version_c
    end function
    function mc_consumer_cancel_waits_c(consumer) bind(c, name="mc_consumer_cancel_waits")
      import :: c_ptr, c_int
      type(c_ptr), value :: consumer
      integer(c_int) :: mc_consumer_cancel_waits_c
    end function
    function mc_producer_get_stats_c(producer, out) bind(c, name="mc_producer_get_stats")
      import :: c_ptr, c_int, mc_producer_stats_t
      type(c_ptr), value :: producer
      type(mc_producer_stats_t), intent(out) :: out
      integer(c_int) :: mc_producer_get_stats_c
    end function
    function mc_consumer_get_group_c(consumer, out) bind(c, name="mc_consumer_get_group")
      import :: c_ptr, c_int, mc_group_state_t
      type(c_ptr), value :: consumer
      type(mc_group_state_t), intent(out) :: out
      integer(c_int) :: mc_consumer_get_group_c
    end function
    function mc_consumer_get_stats_c(consumer, out) bind(c, name="mc_consumer_get_stats")
      import :: c_ptr, c_int, mc_consumer_stats_t
      type(c_ptr), value :: consumer
      type(mc_consumer_stats_t), intent(out) :: out
      integer(c_int) :: mc_consumer_get_stats_c
    end function
    function mc_consumer_get_arriving_c(consumer, version, bytes) bind(c, name="mc_consumer_get_arriving")
      import :: c_ptr, c_int, c_int64_t
      type(c_ptr), value :: consumer
      integer(c_int64_t), intent(inout) :: version, bytes  ! uint64_t in C; written only on success
      integer(c_int) :: mc_consumer_get_arriving_c
    end function
    subroutine mc_view_release_c(view) bind(c, name="mc_view_release")
      import :: c_ptr
      type(c_ptr), value :: view
    end subroutine
    function mc_view_version_c(view) bind(c, name="mc_view_version")
      import :: c_ptr, c_int64_t
      type(c_ptr), value :: view
      integer(c_int64_t) :: mc_view_version_c
    end function
    function mc_view_step_c(view) bind(c, name="mc_view_step")
      import :: c_ptr, c_int64_t
      type(c_ptr), value :: view
      integer(c_int64_t) :: mc_view_step_c
    end function
    function mc_view_metadata_get_c(view, key) bind(c, name="mc_view_metadata_get")
      import :: c_ptr
      type(c_ptr), value :: view, key
      type(c_ptr) :: mc_view_metadata_get_c
    end function
    function mc_view_tensor_count_c(view) bind(c, name="mc_view_tensor_count")
      import :: c_ptr, c_size_t
      type(c_ptr), value :: view
      integer(c_size_t) :: mc_view_tensor_count_c
    end function
    function mc_view_tensor_at_c(view, index, out) bind(c, name="mc_view_tensor_at")
      import :: c_ptr, c_int, c_size_t, mc_tensor_info_t
      type(c_ptr), value :: view
      integer(c_size_t), value :: index
      type(mc_tensor_info_t), intent(out) :: out
      integer(c_int) :: mc_view_tensor_at_c
    end function
    function mc_view_tensor_box_c(view, index, offset, whole_shape, ndim) bind(c, name="mc_view_tensor_box")
      import :: c_ptr, c_int, c_size_t
      type(c_ptr), value :: view
      integer(c_size_t), value :: index
      type(c_ptr), intent(out) :: offset, whole_shape
      integer(c_size_t), intent(out) :: ndim
      integer(c_int) :: mc_view_tensor_box_c
    end function
    function mc_view_find_tensor_c(view, name, out) bind(c, name="mc_view_find_tensor")
      import :: c_ptr, c_int, mc_tensor_info_t
      type(c_ptr), value :: view, name
      type(mc_tensor_info_t), intent(out) :: out
      integer(c_int) :: mc_view_find_tensor_c
    end function
    function mc_set_log_handler_c(handler, user_data) bind(c, name="mc_set_log_handler")
      import :: c_funptr, c_ptr, c_int
      type(c_funptr), value :: handler
      type(c_ptr), value :: user_data
      integer(c_int) :: mc_set_log_handler_c
    end function
    function mc_set_log_level_c(level) bind(c, name="mc_set_log_level")
      import :: c_int
      integer(c_int), value :: level
      integer(c_int) :: mc_set_log_level_c
    end function
    subroutine mc_scheduler_options_init_c(options) bind(c, name="mc_scheduler_options_init")
      import :: mc_scheduler_options_t
      type(mc_scheduler_options_t), intent(out) :: options
    end subroutine
    function mc_scheduler_create_c(options, out) bind(c, name="mc_scheduler_create")
      import :: mc_scheduler_options_t, c_ptr, c_int
      type(mc_scheduler_options_t), intent(in) :: options
      type(c_ptr), intent(out) :: out
      integer(c_int) :: mc_scheduler_create_c
    end function
    subroutine mc_scheduler_destroy_c(scheduler) bind(c, name="mc_scheduler_destroy")
      import :: c_ptr
      type(c_ptr), value :: scheduler
    end subroutine
    function mc_scheduler_observe_c(scheduler, step, loss, wall_time_s) bind(c, name="mc_scheduler_observe")
      import :: c_ptr, c_int, c_int64_t, c_double
      type(c_ptr), value :: scheduler
      integer(c_int64_t), value :: step
      real(c_double), value :: loss, wall_time_s
      integer(c_int) :: mc_scheduler_observe_c
    end function
    function mc_scheduler_should_publish_c(scheduler, step, publish) bind(c, name="mc_scheduler_should_publish")
      import :: c_ptr, c_int, c_int64_t
      type(c_ptr), value :: scheduler
      integer(c_int64_t), value :: step
      integer(c_int), intent(out) :: publish
      integer(c_int) :: mc_scheduler_should_publish_c
    end function
    function mc_scheduler_wait_for_background_c(scheduler) bind(c, name="mc_scheduler_wait_for_background")
      import :: c_ptr, c_int
      type(c_ptr), value :: scheduler
      integer(c_int) :: mc_scheduler_wait_for_background_c
    end function
    function mc_scheduler_set_costs_c(scheduler, publish_cost_s, update_latency_s) bind(c, name="mc_scheduler_set_costs")
      import :: c_ptr, c_int, c_double
      type(c_ptr), value :: scheduler
      real(c_double), value :: publish_cost_s, update_latency_s
      integer(c_int) :: mc_scheduler_set_costs_c
    end function
    pure function c_strlen(text) bind(c, name="strlen")
      import :: c_ptr, c_size_t
      type(c_ptr), value :: text
      integer(c_size_t) :: c_strlen
    end function
    function c_memcpy(destination, source, bytes) bind(c, name="memcpy")
      import :: c_ptr, c_size_t
      type(c_ptr), value :: destination, source
      integer(c_size_t), value :: bytes
      type(c_ptr) :: c_memcpy
    end function
  end interface
end module modelcast_c
