! modelcast: the Fortran interface to modelcast's producer and consumer (over the C ABI,
! include/modelcast/modelcast.h, through ISO_C_BINDING; see modelcast_c for the raw calls).
!
! Array order. modelcast describes tensors in row-major (C) order. A Fortran array is
! column-major, so its shape is registered reversed: real(c_float) :: w(n, m) is published as
! the tensor of shape [m, n], with the same bytes; a C, C++ or Python consumer reads element
! w(i, j) at [j-1][i-1]. mc_view_copy applies the same rule back: the Fortran array it fills
! must have the reversed shape of the tensor (w(n, m) for a tensor of shape [m, n]). Places in
! a tensor (a rank's piece, a consumer's block) are in the same Fortran order and count from 1,
! as Fortran's indices do; ranks and a shard's part count from 0, as MPI's ranks do.
!
! Errors: every function returns an integer status (MC_OK = 0, else an MC_ERR_* code);
! mc_last_error() then names the problem. Strings passed in lose trailing blanks and are copied.
! Lifetimes: a registered array must stay allocated and unmoved (TARGET, no reallocation)
! while the producer lives: modelcast reads it at each publish. Register a variable: an
! expression (mc_producer_register(p, "w", w * 2.0)) does not compile, as the array argument is
! intent(inout). The module cannot see two cases, which gfortran passes as a temporary copy it
! frees on return (each publish would then send whatever lies there): a component of an array
! of derived type (cells%val, z%re), and an array that reaches the call through a dummy of your
! own that is explicit-shape or `contiguous`, given a strided section. Register an array of its
! own instead. A scalar (or one element, a(1, 1)) registers a tensor of one element, not its array.
module modelcast
  use, intrinsic :: iso_c_binding
  use modelcast_c
  use modelcast_support
  use modelcast_scheduler
  implicit none
  private
  public :: MC_OK, MC_ERR_INVALID_ARGUMENT, MC_ERR_LAYOUT_MISMATCH, MC_ERR_PROTOCOL, MC_ERR_TRANSPORT, &
      MC_ERR_TIMEOUT, MC_ERR_INTEGRITY, MC_ERR_STATE, MC_ERR_RESOURCE, MC_ERR_AUTHENTICATION, MC_ERR_UNKNOWN
  public :: MC_DTYPE_F64, MC_DTYPE_F32, MC_DTYPE_F16, MC_DTYPE_BF16, MC_DTYPE_I64, MC_DTYPE_I32, MC_DTYPE_I16, &
      MC_DTYPE_I8, MC_DTYPE_U8, MC_DTYPE_BOOL, MC_DTYPE_F8E4M3
  public :: mc_producer, mc_consumer, mc_view
  public :: mc_last_error, mc_status_name, mc_version_string, mc_load_public_key, mc_write_key_pair
  public :: mc_producer_create, mc_producer_destroy, mc_producer_endpoint, mc_producer_register, &
      mc_producer_register_piece, &
      mc_producer_publish, mc_producer_wait_for_consumers, mc_producer_cancel_waits, mc_producer_copy_stats, &
      mc_producer_persist_stats, mc_producer_refusal_stats, mc_producer_stats, mc_producer_get_stats
  public :: mc_want, mc_want_block, mc_want_shard, mc_want_nothing
  public :: mc_group_state, mc_consumer_get_group
  public :: mc_consumer_create, mc_consumer_destroy, mc_consumer_acquire, mc_consumer_wait_for_version, &
      mc_consumer_cancel_waits, mc_consumer_stats, mc_consumer_get_stats, mc_consumer_get_arriving
  public :: mc_view_release, mc_view_version, mc_view_step, mc_view_copy, mc_view_metadata, mc_view_tensor_count, &
      mc_view_tensor
  public :: mc_scheduler, mc_scheduler_create, mc_scheduler_destroy, mc_scheduler_observe, &
      mc_scheduler_should_publish, mc_scheduler_set_costs, mc_scheduler_wait_for_background
  public :: MC_SCHEDULER_INLINE, MC_SCHEDULER_REFITS_IN_BACKGROUND, MC_SCHEDULER_BACKGROUND
  public :: MC_LOG_TRACE, MC_LOG_DEBUG, MC_LOG_INFO, MC_LOG_WARN, MC_LOG_ERROR, MC_LOG_CRITICAL, MC_LOG_OFF
  public :: mc_log_handler, mc_set_log_handler, mc_set_log_level, mc_string

  ! Handles; each owns its C object until the matching _destroy / _release, which nulls the
  ! handle passed. A copy (p2 = p) names the same object: once one is destroyed or released, the
  ! copies must not be used (the module cannot see them; the C object is gone).
  type :: mc_producer
    type(c_ptr) :: handle = c_null_ptr
    integer :: rank_count = 1  ! as created: a piece of the only rank must be its whole tensor
  end type
  type :: mc_consumer
    type(c_ptr) :: handle = c_null_ptr
  end type
  type :: mc_view
    type(c_ptr) :: handle = c_null_ptr  ! c_null_ptr: no version yet
  end type

  ! What a producer has done so far (mc_producer_get_stats). Counts are C's uint64_t, here
  ! integer(c_int64_t): Fortran has no unsigned kind, and no count comes near 2^63.
  type :: mc_producer_stats
    integer(c_int64_t) :: latest_version = 0      ! newest version offered (may lag a publish for moments)
    integer(c_int64_t) :: versions_published = 0
    integer(c_int64_t) :: deliveries = 0          ! verified acks from consumers
    integer(c_int64_t) :: failed_deliveries = 0
    integer(c_int64_t) :: leases_expired = 0
    integer(c_int64_t) :: bad_messages = 0        ! malformed or unknown-version requests dropped
    integer(c_int64_t) :: bytes_sent = 0
    integer(c_int64_t) :: consumers = 0           ! joined and not known dead
    integer(c_int64_t) :: last_stall_ns = 0
    character(len=31) :: transport = ""           ! e.g. "ucx"
  end type

  ! What a consumer has done so far (mc_consumer_get_stats). Counts are C's uint64_t, here
  ! integer(c_int64_t): Fortran has no unsigned kind, and no count comes near 2^63.
  type :: mc_consumer_stats
    integer(c_int64_t) :: current_version = 0     ! the newest version installed (0: none yet)
    integer(c_int64_t) :: versions_installed = 0
    integer(c_int64_t) :: versions_rejected = 0   ! digest or layout failures
    integer(c_int64_t) :: transfers_aborted = 0
    integer(c_int64_t) :: bad_messages = 0
    integer(c_int64_t) :: reconnects = 0
    integer(c_int64_t) :: bytes_received = 0
    integer(c_int64_t) :: last_update_latency_ns = 0  ! publish call until installed here (same-host clocks)
    integer(c_int64_t) :: last_notify_latency_ns = 0  ! publish call until announced here
    character(len=255) :: last_error = ""             ! blank if none; cut at 255 characters
  end type

  ! What a consumer keeps of a tensor (mc_consumer_create's wants), made by mc_want_block,
  ! mc_want_shard or mc_want_nothing. `tensor` is a name, or "*" for every tensor not named in
  ! another want.
  type :: mc_want
    character(len=:), allocatable :: tensor
    logical :: nothing = .false., shard = .false.
    integer(c_int64_t), allocatable :: start(:), shape(:)  ! a block; Fortran order, start from 1
    integer :: index = 0, count = 1                         ! a shard
  end type

  ! The C side of a consumer's wants, alive until mc_consumer_create returns (it copies them).
  type :: int64_values
    integer(c_int64_t), allocatable :: values(:)
  end type
  type :: wants_in_c
    type(c_text), allocatable :: names(:)
    type(mc_tensor_want_t), allocatable :: wants(:)
    type(int64_values), allocatable :: offsets(:), extents(:)
  end type

  ! Where a member of a consumer group stands (mc_consumer_get_group): the version its group last
  ! switched to, the version it holds verified while it waits for the others (0: none), and
  ! whether the group lacks members (it then stays on group_version). All 0 outside a group.
  type :: mc_group_state
    integer(c_int64_t) :: group_version = 0
    integer(c_int64_t) :: prepared_version = 0
    logical :: waiting = .false.
  end type

  ! Registers a contiguous array of any rank (real(c_float), real(c_double), integer(c_int32_t),
  ! integer(c_int64_t)) under `name`, its shape reversed (see Array order). Before the first publish.
  interface mc_producer_register
    module procedure register_f32, register_f64, register_i32, register_i64
  end interface
  ! Registers this rank's piece of a tensor of several ranks (see piece_f32 below).
  interface mc_producer_register_piece
    module procedure piece_f32, piece_f64, piece_i32, piece_i64
  end interface
  ! Copies the tensor `name` of a view into an array of the same type and reversed shape.
  interface mc_view_copy
    module procedure copy_f32, copy_f64, copy_i32, copy_i64
  end interface
  ! Publishes a version; the step is an integer of either kind (c_int64_t or default).
  interface mc_producer_publish
    module procedure publish_i64, publish_i32
  end interface

contains

  ! ---- strings -------------------------------------------------------------------------

  ! "ok", "timeout", ... for a status.
  function mc_status_name(status) result(text)
    integer, intent(in) :: status
    character(len=c_text_length(mc_status_name_c(int(status, c_int)))) :: text
    text = f_string(mc_status_name_c(int(status, c_int)))
  end function

  ! The loaded library's version, e.g. "0.1.0".
  function mc_version_string() result(text)
    character(len=c_text_length(mc_version_string_c())) :: text
    text = f_string(mc_version_string_c())
  end function

  ! ---- logging -------------------------------------------------------------------------

  ! Routes modelcast's log messages to `handler` (a bind(c) subroutine with the mc_log_handler
  ! interface; mc_string turns its C strings into Fortran ones), with `user_data` passed back;
  ! without a handler, back to stderr. The handler runs on modelcast's threads, one call at a
  ! time, and must not call into modelcast (see mc_set_log_handler in modelcast_runtime.h).
  integer function mc_set_log_handler(handler, user_data) result(status)
    procedure(mc_log_handler), optional :: handler
    type(c_ptr), intent(in), optional :: user_data
    type(c_ptr) :: data
    data = c_null_ptr
    if (present(user_data)) data = user_data
    if (present(handler)) then
      status = from_c(mc_set_log_handler_c(c_funloc(handler), data))
    else
      status = from_c(mc_set_log_handler_c(c_null_funptr, data))
    end if
  end function

  ! Level of every modelcast logger (MC_LOG_TRACE .. MC_LOG_OFF), instead of MODELCAST_LOG_LEVEL.
  integer function mc_set_log_level(level) result(status)
    integer, intent(in) :: level
    status = from_c(mc_set_log_level_c(int(level, c_int)))
  end function

  ! A C string (as a log handler receives them) as a Fortran string.
  function mc_string(pointer) result(text)
    type(c_ptr), intent(in) :: pointer
    character(len=c_text_length(pointer)) :: text
    text = f_string(pointer)
  end function

  ! ---- producer ------------------------------------------------------------------------

  ! Binds control_endpoint (default "tcp://127.0.0.1:0": a free port; read it back with
  ! mc_producer_endpoint) and starts the producer's threads. key_file: a modelcast-keygen key
  ! pair (CurveZMQ, signed versions); without one, plaintext on loopback/ipc:// only (ipc:// in a
  ! directory no other user can write).
  ! With a key file, consumers are admitted by their public keys (Z85, 40 characters each, e.g.
  ! read with mc_load_public_key): allowed_consumer_keys, or allow_any_consumer.
  ! relay_fanout > 0: consumers relay versions to each other (ProducerOptions::relay_fanout).
  ! A model trained sharded (an MPI code's domain decomposition): this producer is rank `rank`
  ! (0-based, as MPI's) of `rank_count`, and registers its pieces with mc_producer_register_piece.
  ! Rank 0 also takes rank_endpoints: every rank's mc_producer_endpoint in rank order (its own
  ! entry is not read and may be blank), so start ranks 1.. first and gather their endpoints
  ! (MPI_Allgather of a character(len=256)), then rank 0. Consumers are told rank 0's endpoint.
  ! run_id: the same on every rank of a run and new at each restart (the job id and restart
  ! count): consumers never put pieces of two runs together (ProducerOptions::run_id).
  integer function mc_producer_create(producer, model_name, control_endpoint, key_file, allow_any_consumer, &
                                      integrity, relay_fanout, allowed_consumer_keys, rank, rank_count, &
                                      rank_endpoints, run_id) result(status)
    type(mc_producer), intent(inout) :: producer
    character(len=*), intent(in) :: model_name
    character(len=*), intent(in), optional :: control_endpoint, key_file
    logical, intent(in), optional :: allow_any_consumer, integrity
    integer, intent(in), optional :: relay_fanout, rank, rank_count
    character(len=*), intent(in), optional :: allowed_consumer_keys(:), rank_endpoints(:)
    character(len=*), intent(in), optional :: run_id
    type(mc_producer_options_t) :: options
    character(kind=c_char), allocatable, target :: name_c(:), endpoint_c(:), key_c(:), run_id_c(:)
    type(c_text), allocatable, target :: keys_c(:), rank_endpoints_c(:)
    type(c_ptr), allocatable, target :: key_pointers(:), rank_endpoint_pointers(:)
    integer :: i
    if (present(relay_fanout)) then
      if (relay_fanout < 0) then
        status = module_failure(MC_ERR_INVALID_ARGUMENT, "mc_producer_create: relay_fanout is negative")
        return
      end if
    end if
    ! C takes both as uint32_t: a negative one would arrive as a rank near 2^32.
    if (present(rank)) then
      if (rank < 0) then
        status = module_failure(MC_ERR_INVALID_ARGUMENT, "mc_producer_create: rank is " // &
            count_text(int(rank, c_int64_t)) // "; ranks count from 0, as MPI's")
        return
      end if
    end if
    if (present(rank_count)) then
      if (rank_count < 1) then
        status = module_failure(MC_ERR_INVALID_ARGUMENT, "mc_producer_create: rank_count is " // &
            count_text(int(rank_count, c_int64_t)) // "; at least 1")
        return
      end if
    end if
    if (c_associated(producer%handle)) then
      ! intent(out) reset the handle and lost the live producer: its threads ran on, its port stayed bound.
      status = module_failure(MC_ERR_STATE, "mc_producer_create: the producer variable holds a live producer; "// &
          "mc_producer_destroy it first")
      return
    end if
    if (holds_nul("mc_producer_create", model_name, status)) return
    if (present(control_endpoint)) then
      if (bad_text("mc_producer_create: control_endpoint", control_endpoint, status)) return
    end if
    if (present(key_file)) then
      if (bad_text("mc_producer_create: key_file", key_file, status)) return
    end if
    if (present(run_id)) then
      ! Blank is refused, not taken as none: a run id read from an unset variable would
      ! otherwise leave the ranks unguarded without a word.
      if (bad_text("mc_producer_create: run_id", run_id, status)) return
    end if
    if (present(allowed_consumer_keys)) then
      do i = 1, size(allowed_consumer_keys)
        if (holds_nul("mc_producer_create: allowed_consumer_keys", allowed_consumer_keys(i), status)) return
      end do
    end if
    if (present(rank_endpoints)) then
      do i = 1, size(rank_endpoints)
        if (holds_nul("mc_producer_create: rank_endpoints", rank_endpoints(i), status)) return
      end do
    end if
    call mc_producer_options_init_c(options)
    if (options%struct_size /= c_sizeof(options)) then
      status = struct_mismatch("mc_producer_create", options%struct_size, c_sizeof(options))
      return
    end if
    call to_c(model_name, name_c)
    options%model_name = c_loc(name_c)
    if (present(control_endpoint)) then
      call to_c(control_endpoint, endpoint_c)
      options%control_endpoint = c_loc(endpoint_c)
    end if
    if (present(key_file)) then
      call to_c(key_file, key_c)
      options%key_file = c_loc(key_c)
    end if
    if (present(allow_any_consumer)) options%allow_any_consumer = merge(1_c_int, 0_c_int, allow_any_consumer)
    if (present(integrity)) options%integrity = merge(1_c_int, 0_c_int, integrity)
    if (present(relay_fanout)) options%relay_fanout = int(relay_fanout, c_size_t)
    if (present(allowed_consumer_keys)) then
      call to_c_array(allowed_consumer_keys, keys_c, key_pointers)
      options%allowed_consumer_keys = c_loc(key_pointers)
      options%allowed_consumer_key_count = int(size(allowed_consumer_keys), c_size_t)
    end if
    if (present(rank)) options%rank = int(rank, c_int32_t)
    if (present(rank_count)) options%rank_count = int(rank_count, c_int32_t)
    if (present(rank_endpoints)) then
      call to_c_array(rank_endpoints, rank_endpoints_c, rank_endpoint_pointers)
      options%rank_endpoints = c_loc(rank_endpoint_pointers)
      options%rank_endpoint_count = int(size(rank_endpoints), c_size_t)
    end if
    if (present(run_id)) then
      call to_c(run_id, run_id_c)
      options%run_id = c_loc(run_id_c)
    end if
    status = from_c(mc_producer_create_c(options, producer%handle))
    if (status == MC_OK .and. present(rank_count)) producer%rank_count = rank_count
  end function

  ! Stops the producer and frees it; transfers in flight are abandoned.
  subroutine mc_producer_destroy(producer)
    type(mc_producer), intent(inout) :: producer
    call mc_producer_destroy_c(producer%handle)
    producer%handle = c_null_ptr
    producer%rank_count = 1
  end subroutine

  ! The control endpoint actually bound, for consumers.
  function mc_producer_endpoint(producer) result(endpoint)
    type(mc_producer), intent(in) :: producer
    character(len=c_text_length(mc_producer_endpoint_c(producer%handle))) :: endpoint
    endpoint = f_string(mc_producer_endpoint_c(producer%handle))
  end function

  ! `contiguous` is the array's: the register functions take arrays without the contiguous
  ! attribute, so a strided section arrives as it is (with it, gfortran would pass a temporary
  ! copy that the call frees, and the producer would snapshot freed memory) and is refused here.
  ! With global_shape and global_start (both or neither), the array is a piece of a tensor
  ! registered by several ranks (mc_producer_register_piece), else a tensor of its own.
  integer function register_raw(producer, name, dtype, extents, data, contiguous, global_shape, global_start) &
      result(status)
    type(mc_producer), intent(in) :: producer
    character(len=*), intent(in) :: name
    integer(c_int), intent(in) :: dtype
    integer(c_int64_t), intent(in) :: extents(:)
    type(c_ptr), intent(in) :: data
    logical, intent(in) :: contiguous
    class(*), intent(in), optional :: global_shape(:), global_start(:)
    character(kind=c_char), allocatable, target :: name_c(:)
    integer(c_int64_t) :: shape(max(1, size(extents))), whole(max(1, size(extents))), offset(max(1, size(extents)))
    integer(c_int64_t), allocatable :: global(:), first(:)
    logical :: shape_ok, start_ok
    character(len=:), allocatable :: call_name
    integer :: i, n
    call_name = "mc_producer_register"
    if (present(global_shape)) call_name = "mc_producer_register_piece"
    if (holds_nul(call_name, name, status)) return
    ! First: an unallocated array's or a null pointer's extents and contiguity are whatever its
    ! descriptor held, and the checks below gave one of their reasons for it at random.
    if (.not. c_associated(data)) then
      status = module_failure(MC_ERR_INVALID_ARGUMENT, call_name // ": the array for '" // trim(name) // &
          "' is not allocated (or a pointer not associated)")
      return
    end if
    ! An assumed-size dummy (a(n, *)) has no last extent: shape() says -1.
    if (any(extents < 0)) then
      status = module_failure(MC_ERR_INVALID_ARGUMENT, call_name // ": the array for '" // trim(name) // &
          "' is assumed-size (declared a(n, *)): its size is unknown; pass it with its whole shape (a(n, m))")
      return
    end if
    if (.not. contiguous) then
      status = module_failure(MC_ERR_INVALID_ARGUMENT, call_name // ": the array for '" // trim(name) // &
          "' is not contiguous (a strided section?); register a whole array or a contiguous section")
      return
    end if
    n = size(extents)
    do i = 1, n  ! column-major extents, reversed into row-major order
      shape(i) = extents(n + 1 - i)
    end do
    call to_c(name, name_c)
    if (.not. present(global_shape)) then
      status = from_c(mc_producer_register_tensor_c(producer%handle, c_loc(name_c), dtype, int(n, c_size_t), shape, &
                                                    data))
      return
    end if
    call as_int64(global_shape, global, shape_ok)
    call as_int64(global_start, first, start_ok)
    if (.not. (shape_ok .and. start_ok)) then
      status = module_failure(MC_ERR_INVALID_ARGUMENT, call_name // ": global_shape and global_start of '" // &
          trim(name) // "' are integer arrays (default kind or c_int64_t)")
      return
    end if
    if (piece_misplaced(name, extents, global, first, producer%rank_count, status)) return
    do i = 1, n  ! reversed as the extents; 1-based Fortran starts become 0-based offsets
      whole(i) = global(n + 1 - i)
      offset(i) = first(n + 1 - i) - 1
    end do
    status = from_c(mc_producer_register_piece_c(producer%handle, c_loc(name_c), dtype, int(n, c_size_t), shape, &
                                                 whole, offset, data))
  end function

  ! True (status set, naming the tensor in Fortran's terms) unless the piece's global_shape and
  ! global_start have one entry per dimension of the array and the piece lies inside the whole.
  ! The library checks the same, but in its row-major order: its message would show the
  ! dimensions reversed and the starts 0-based.
  logical function piece_misplaced(name, extents, whole, first, rank_count, status)
    character(len=*), intent(in) :: name
    integer(c_int64_t), intent(in) :: extents(:), whole(:), first(:)
    integer, intent(in) :: rank_count
    integer, intent(out) :: status
    character(len=:), allocatable :: range
    integer :: i
    piece_misplaced = .true.
    if (size(whole) /= size(extents) .or. size(first) /= size(extents)) then
      status = module_failure(MC_ERR_INVALID_ARGUMENT, "mc_producer_register_piece: the array for '" // trim(name) // &
          "' has " // count_text(int(size(extents), c_int64_t)) // " dimension(s), global_shape " // &
          count_text(int(size(whole), c_int64_t)) // " and global_start " // count_text(int(size(first), c_int64_t)) // &
          "; give one of each per dimension")
      return
    end if
    range = "("
    do i = 1, size(extents)
      range = range // count_text(first(i)) // ":" // count_text(first(i) + extents(i) - 1)
      if (i < size(extents)) range = range // ", "
    end do
    range = range // ")"
    if (any(first < 1) .or. any(first + extents - 1 > whole)) then
      status = module_failure(MC_ERR_INVALID_ARGUMENT, "mc_producer_register_piece: the array for '" // trim(name) // &
          "' would be elements " // range // " of a tensor of shape " // extents_text(whole) // &
          ", which has no such elements (global_start counts from 1)")
      return
    end if
    if (rank_count == 1 .and. (any(first /= 1) .or. any(extents /= whole))) then
      status = module_failure(MC_ERR_INVALID_ARGUMENT, "mc_producer_register_piece: the array for '" // trim(name) // &
          "' is elements " // range // " of a tensor of shape " // extents_text(whole) // &
          ", but this producer is its model's only rank (rank_count 1): no rank would publish the rest; " // &
          "create each rank's producer with rank= and rank_count=")
      return
    end if
    piece_misplaced = .false.
    status = MC_OK
  end function

  ! intent(inout), though nothing is written: the array must be a variable, which the compiler
  ! then checks. With intent(in) an expression (w * 2.0, transpose(w)) compiled and registered a
  ! temporary freed when the call returned, and every publish sent whatever lay there since.
  integer function register_f32(producer, name, array) result(status)
    type(mc_producer), intent(in) :: producer
    character(len=*), intent(in) :: name
    real(c_float), dimension(..), target, intent(inout) :: array
    status = register_raw(producer, name, MC_DTYPE_F32, shape(array, kind=c_int64_t), c_loc(array), is_contiguous(array))
  end function
  integer function register_f64(producer, name, array) result(status)
    type(mc_producer), intent(in) :: producer
    character(len=*), intent(in) :: name
    real(c_double), dimension(..), target, intent(inout) :: array
    status = register_raw(producer, name, MC_DTYPE_F64, shape(array, kind=c_int64_t), c_loc(array), is_contiguous(array))
  end function
  integer function register_i32(producer, name, array) result(status)
    type(mc_producer), intent(in) :: producer
    character(len=*), intent(in) :: name
    integer(c_int32_t), dimension(..), target, intent(inout) :: array
    status = register_raw(producer, name, MC_DTYPE_I32, shape(array, kind=c_int64_t), c_loc(array), is_contiguous(array))
  end function
  integer function register_i64(producer, name, array) result(status)
    type(mc_producer), intent(in) :: producer
    character(len=*), intent(in) :: name
    integer(c_int64_t), dimension(..), target, intent(inout) :: array
    status = register_raw(producer, name, MC_DTYPE_I64, shape(array, kind=c_int64_t), c_loc(array), is_contiguous(array))
  end function

  ! This rank's piece of a tensor of several ranks (see mc_producer_create's rank): the array is
  ! elements global_start(1) : global_start(1) + size(array, 1) - 1, ... (1-based, Fortran order)
  ! of a tensor of global_shape. Ranks may hold the same elements (a replicated tensor): those
  ! must then hold the same values, so register a halo-free copy, not an array with halo cells
  ! that a neighbour's update has overtaken. Before the first publish. global_shape and
  ! global_start are integer arrays of default kind or c_int64_t (an extent past 2^31 - 1).
  integer function piece_f32(producer, name, array, global_shape, global_start) result(status)
    type(mc_producer), intent(in) :: producer
    character(len=*), intent(in) :: name
    real(c_float), dimension(..), target, intent(inout) :: array
    class(*), intent(in) :: global_shape(:), global_start(:)
    status = register_raw(producer, name, MC_DTYPE_F32, shape(array, kind=c_int64_t), c_loc(array), is_contiguous(array), &
                          global_shape, global_start)
  end function
  integer function piece_f64(producer, name, array, global_shape, global_start) result(status)
    type(mc_producer), intent(in) :: producer
    character(len=*), intent(in) :: name
    real(c_double), dimension(..), target, intent(inout) :: array
    class(*), intent(in) :: global_shape(:), global_start(:)
    status = register_raw(producer, name, MC_DTYPE_F64, shape(array, kind=c_int64_t), c_loc(array), is_contiguous(array), &
                          global_shape, global_start)
  end function
  integer function piece_i32(producer, name, array, global_shape, global_start) result(status)
    type(mc_producer), intent(in) :: producer
    character(len=*), intent(in) :: name
    integer(c_int32_t), dimension(..), target, intent(inout) :: array
    class(*), intent(in) :: global_shape(:), global_start(:)
    status = register_raw(producer, name, MC_DTYPE_I32, shape(array, kind=c_int64_t), c_loc(array), is_contiguous(array), &
                          global_shape, global_start)
  end function
  integer function piece_i64(producer, name, array, global_shape, global_start) result(status)
    type(mc_producer), intent(in) :: producer
    character(len=*), intent(in) :: name
    integer(c_int64_t), dimension(..), target, intent(inout) :: array
    class(*), intent(in) :: global_shape(:), global_start(:)
    status = register_raw(producer, name, MC_DTYPE_I64, shape(array, kind=c_int64_t), c_loc(array), is_contiguous(array), &
                          global_shape, global_start)
  end function

  ! Copies every registered array into a snapshot and returns; delivery runs in the background.
  ! version (optional) receives the number assigned to this publish.
  ! metadata_keys and metadata_values (optional, together, of one size) travel with the version
  ! as text (trailing blanks dropped): a consumer reads them with mc_view_metadata.
  integer function publish_i64(producer, step, version, metadata_keys, metadata_values) result(status)
    type(mc_producer), intent(in) :: producer
    integer(c_int64_t), intent(in) :: step
    integer(c_int64_t), intent(out), optional :: version
    character(len=*), intent(in), optional :: metadata_keys(:), metadata_values(:)
    type(mc_publish_result_t) :: result
    type(c_text), allocatable, target :: keys_c(:), values_c(:)
    type(c_ptr), allocatable, target :: key_pointers(:), value_pointers(:)
    integer :: i, n
    if (present(version)) version = 0
    if (present(metadata_keys) .neqv. present(metadata_values)) then
      status = module_failure(MC_ERR_INVALID_ARGUMENT, "mc_producer_publish: metadata_keys and metadata_values " // &
          "go together; nothing was published")
      return
    end if
    n = 0
    if (present(metadata_keys)) then
      if (size(metadata_keys) /= size(metadata_values)) then
        status = module_failure(MC_ERR_INVALID_ARGUMENT, "mc_producer_publish: " // &
            count_text(int(size(metadata_keys), c_int64_t)) // " metadata_keys but " // &
            count_text(int(size(metadata_values), c_int64_t)) // " metadata_values; nothing was published")
        return
      end if
      n = size(metadata_keys)
      do i = 1, n
        if (holds_nul("mc_producer_publish: a metadata key", metadata_keys(i), status)) return
        if (holds_nul("mc_producer_publish: a metadata value", metadata_values(i), status)) return
      end do
    end if
    if (present(metadata_keys)) then
      call to_c_array(metadata_keys, keys_c, key_pointers)
      call to_c_array(metadata_values, values_c, value_pointers)
    else
      allocate(key_pointers(1), value_pointers(1))
    end if
    status = from_c(mc_producer_publish_c(producer%handle, step, c_loc(key_pointers), c_loc(value_pointers), &
                                          int(n, c_size_t), result))
    if (present(version)) version = result%version
  end function

  ! The same with a default-kind step (`integer :: step`, what a simulation's loop counter is).
  integer function publish_i32(producer, step, version, metadata_keys, metadata_values) result(status)
    type(mc_producer), intent(in) :: producer
    integer(c_int32_t), intent(in) :: step
    integer(c_int64_t), intent(out), optional :: version
    character(len=*), intent(in), optional :: metadata_keys(:), metadata_values(:)
    status = publish_i64(producer, int(step, c_int64_t), version, metadata_keys, metadata_values)
  end function

  ! Waits at most timeout_ms until `count` consumers have joined (MC_ERR_TIMEOUT otherwise).
  integer function mc_producer_wait_for_consumers(producer, count, timeout_ms) result(status)
    type(mc_producer), intent(in) :: producer
    integer, intent(in) :: count
    integer(c_int64_t), intent(in) :: timeout_ms
    if (count < 0) then
      status = module_failure(MC_ERR_INVALID_ARGUMENT, "mc_producer_wait_for_consumers: count is negative")
      return
    end if
    status = from_c(mc_producer_wait_for_consumers_c(producer%handle, int(count, c_size_t), timeout_ms))
  end function

  ! Ends every mc_producer_wait_for_consumers under way (another thread's, e.g. an OpenMP
  ! section's) and every later one with MC_ERR_STATE; call it before destroying a waited-on producer.
  integer function mc_producer_cancel_waits(producer) result(status)
    type(mc_producer), intent(in) :: producer
    status = from_c(mc_producer_cancel_waits_c(producer%handle))
  end function

  ! Bytes mc_producer_publish has copied into snapshot slots, all versions together: the whole
  ! model per version, or less while little of the model changes between versions.
  integer function mc_producer_copy_stats(producer, snapshot_bytes_copied) result(status)
    type(mc_producer), intent(in) :: producer
    integer(c_int64_t), intent(out) :: snapshot_bytes_copied
    status = from_c(mc_producer_get_copy_stats_c(producer%handle, snapshot_bytes_copied))
  end function

  ! The persist option's counters: versions written, writes that failed, versions skipped while
  ! a write was going.
  integer function mc_producer_persist_stats(producer, persisted, failures, skipped) result(status)
    type(mc_producer), intent(in) :: producer
    integer(c_int64_t), intent(out) :: persisted, failures, skipped
    status = from_c(mc_producer_get_persist_stats_c(producer%handle, persisted, failures, skipped))
  end function

  ! Who the producer turned away: joins it refused (each joiner is told why) and key handshakes
  ! refused (keys not on the allow-list).
  integer function mc_producer_refusal_stats(producer, refused_joins, refused_peers) result(status)
    type(mc_producer), intent(in) :: producer
    integer(c_int64_t), intent(out) :: refused_joins, refused_peers
    status = from_c(mc_producer_get_refusal_stats_c(producer%handle, refused_joins, refused_peers))
  end function

  ! Versions published and delivered, consumers, bytes sent and the last publish's stall. Any
  ! thread; a destroyed (or never created) producer is MC_ERR_INVALID_ARGUMENT.
  integer function mc_producer_get_stats(producer, stats) result(status)
    type(mc_producer), intent(in) :: producer
    type(mc_producer_stats), intent(out) :: stats
    type(mc_producer_stats_t) :: raw
    status = from_c(mc_producer_get_stats_c(producer%handle, raw))
    if (status /= MC_OK) return
    stats%latest_version = raw%latest_version
    stats%versions_published = raw%versions_published
    stats%deliveries = raw%deliveries
    stats%failed_deliveries = raw%failed_deliveries
    stats%leases_expired = raw%leases_expired
    stats%bad_messages = raw%bad_messages
    stats%bytes_sent = raw%bytes_sent
    stats%consumers = raw%consumers
    stats%last_stall_ns = raw%last_stall_ns
    call from_c_chars(raw%transport, stats%transport)
  end function

  ! ---- consumer ------------------------------------------------------------------------

  ! The public key in a `.pub` file (modelcast-keygen writes one next to each key pair), for
  ! mc_consumer_create's producer_public_key: 40 characters (Z85), blank-filled past them.
  ! (With a character(len=40) dummy a longer variable kept its old text past the 40th.)
  integer function mc_load_public_key(path, public_key) result(status)
    character(len=*), intent(in) :: path
    character(len=*), intent(out) :: public_key
    character(kind=c_char), allocatable :: path_c(:)
    character(kind=c_char) :: key_c(41)
    public_key = ""
    if (bad_key_variable("mc_load_public_key", public_key, status)) return
    if (bad_text("mc_load_public_key: path", path, status, required=.true.)) return
    call to_c(path, path_c)
    status = from_c(mc_load_public_key_c(path_c, key_c))
    if (status /= MC_OK) return
    public_key = key_text(key_c)
  end function

  ! Writes a fresh key pair to `path` (readable by its owner only) and its public key to
  ! `path`.pub, as modelcast-keygen does: a code can make its own keys at its first start.
  ! public_key (optional, character(len=40)) receives the public key. An existing file is
  ! refused (naming it) unless overwrite.
  integer function mc_write_key_pair(path, public_key, overwrite) result(status)
    character(len=*), intent(in) :: path
    character(len=*), intent(out), optional :: public_key
    logical, intent(in), optional :: overwrite
    character(kind=c_char), allocatable :: path_c(:)
    character(kind=c_char) :: key_c(41)
    integer(c_int) :: replace
    if (present(public_key)) then
      public_key = ""
      if (bad_key_variable("mc_write_key_pair", public_key, status)) return
    end if
    if (bad_text("mc_write_key_pair: path", path, status, required=.true.)) return
    replace = 0
    if (present(overwrite)) replace = merge(1_c_int, 0_c_int, overwrite)
    call to_c(path, path_c)
    status = from_c(mc_write_key_pair_c(path_c, replace, key_c))
    if (status /= MC_OK) return
    if (present(public_key)) public_key = key_text(key_c)
  end function

  ! True (status MC_ERR_INVALID_ARGUMENT) when `key` cannot hold a key's 40 characters.
  logical function bad_key_variable(what, key, status)
    character(len=*), intent(in) :: what, key
    integer, intent(out) :: status
    status = MC_OK
    bad_key_variable = len(key) < 40
    if (bad_key_variable) status = module_failure(MC_ERR_INVALID_ARGUMENT, what // ": public_key holds " // &
        count_text(int(len(key), c_int64_t)) // " characters; a key needs 40 (character(len=40))")
  end function

  ! The 40 Z85 characters of a key the C library wrote (NUL-terminated) as text.
  function key_text(chars) result(text)
    character(kind=c_char), intent(in) :: chars(41)
    character(len=40) :: text
    integer :: i
    do i = 1, 40
      text(i:i) = chars(i)
    end do
  end function

  ! Starts a consumer of `model_name` at the producer's control endpoint (it joins in the
  ! background). producer_public_key (Z85) pins the producer; key_file is this consumer's key pair.
  ! as_f32: tensors the producer sends as f16 or bf16 (a PyTorch trainer's half precision, which
  ! Fortran has no type for) are served as f32, widened exactly once each version is verified,
  ! so mc_view_copy fills real(c_float) arrays with them; f32 tensors stay as they are.
  ! group and group_size: this consumer is one of group_size (a sharded server's ranks, each
  ! keeping its own block) that switch versions together: none serves a version before every
  ! member holds it (mc_consumer_get_group says where the group stands).
  integer function mc_consumer_create(consumer, producer_endpoint, model_name, producer_public_key, key_file, wants, &
                                      as_f32, group, group_size) result(status)
    type(mc_consumer), intent(inout) :: consumer
    character(len=*), intent(in) :: producer_endpoint, model_name
    character(len=*), intent(in), optional :: producer_public_key, key_file, group
    type(mc_want), intent(in), optional :: wants(:)
    logical, intent(in), optional :: as_f32
    integer, intent(in), optional :: group_size
    character(kind=c_char), allocatable, target :: group_c(:)
    type(mc_tensor_conversion_t), target :: to_f32(1)
    character(kind=c_char), target :: every_tensor(2) = [character(kind=c_char) :: "*", c_null_char]
    type(mc_consumer_options_t) :: options
    character(kind=c_char), allocatable, target :: endpoint_c(:), name_c(:), public_c(:), key_c(:)
    ! Allocatable: as a plain local, gfortran 12 warns (wrongly) that its components' bounds may
    ! be read uninitialised when the function returns early.
    type(wants_in_c), allocatable, target :: wants_c
    if (c_associated(consumer%handle)) then
      status = module_failure(MC_ERR_STATE, "mc_consumer_create: the consumer variable holds a live consumer; "// &
          "mc_consumer_destroy it first")
      return
    end if
    if (holds_nul("mc_consumer_create: producer_endpoint", producer_endpoint, status)) return
    if (holds_nul("mc_consumer_create: model_name", model_name, status)) return
    ! A blank producer_public_key would pin nothing (mc_load_public_key leaves the key blank when it fails).
    if (present(producer_public_key)) then
      if (bad_text("mc_consumer_create: producer_public_key", producer_public_key, status)) return
    end if
    if (present(key_file)) then
      if (bad_text("mc_consumer_create: key_file", key_file, status)) return
    end if
    if (present(wants)) then
      allocate(wants_c)
      if (bad_wants(wants, wants_c, status)) return
    end if
    if (present(group)) then
      if (bad_text("mc_consumer_create: group", group, status)) return
    end if
    ! C takes it as uint32_t: a negative size would arrive near 2^32.
    if (present(group_size)) then
      if (group_size < 0) then
        status = module_failure(MC_ERR_INVALID_ARGUMENT, "mc_consumer_create: group_size is " // &
            count_text(int(group_size, c_int64_t)) // "; a group has at least 1 member")
        return
      end if
    end if
    call mc_consumer_options_init_c(options)
    if (options%struct_size /= c_sizeof(options)) then
      status = struct_mismatch("mc_consumer_create", options%struct_size, c_sizeof(options))
      return
    end if
    call to_c(producer_endpoint, endpoint_c)
    call to_c(model_name, name_c)
    options%producer_endpoint = c_loc(endpoint_c)
    options%model_name = c_loc(name_c)
    if (present(producer_public_key)) then
      call to_c(producer_public_key, public_c)
      options%producer_public_key = c_loc(public_c)
    end if
    if (present(key_file)) then
      call to_c(key_file, key_c)
      options%key_file = c_loc(key_c)
    end if
    if (present(wants)) then
      options%wants = c_loc(wants_c%wants)
      options%want_count = int(size(wants), c_size_t)
    end if
    if (present(group)) then
      call to_c(group, group_c)
      options%group = c_loc(group_c)
    end if
    if (present(group_size)) options%group_size = int(group_size, c_int32_t)
    if (present(as_f32)) then
      if (as_f32) then
        to_f32(1) = mc_tensor_conversion_t(c_loc(every_tensor), MC_DTYPE_F32, 0_c_size_t)
        options%conversions = c_loc(to_f32)
        options%conversion_count = 1
      end if
    end if
    status = from_c(mc_consumer_create_c(options, consumer%handle))
  end function

  ! Keep only elements start(1) : start(1) + shape(1) - 1, ... (Fortran order, 1-based) of
  ! `tensor` ("*": of every tensor not named in another want). One block per tensor.
  ! start and shape are integer arrays of default kind or c_int64_t.
  function mc_want_block(tensor, start, shape) result(want)
    character(len=*), intent(in) :: tensor
    class(*), intent(in) :: start(:), shape(:)
    type(mc_want) :: want
    logical :: start_ok, shape_ok
    want%tensor = trim(tensor)
    ! Another type leaves the want incomplete, and mc_consumer_create refuses it by name.
    call as_int64(start, want%start, start_ok)
    call as_int64(shape, want%shape, shape_ok)
    if (.not. (start_ok .and. shape_ok)) deallocate(want%start, want%shape)
  end function

  ! Keep part `index` (0-based, as an MPI rank) of `count` of `tensor` along its last Fortran
  ! dimension (C's first; split as torch.chunk splits it: parts of ceil(extent / count), the last
  ! ones smaller or empty). Under "*", a tensor of rank 0 is kept whole.
  function mc_want_shard(tensor, index, count) result(want)
    character(len=*), intent(in) :: tensor
    integer, intent(in) :: index, count
    type(mc_want) :: want
    want%tensor = trim(tensor)
    want%shard = .true.
    want%index = index
    want%count = count
    allocate(want%start(0), want%shape(0))
  end function

  ! Keep none of `tensor` ("*": of every tensor not named in another want).
  function mc_want_nothing(tensor) result(want)
    character(len=*), intent(in) :: tensor
    type(mc_want) :: want
    want%tensor = trim(tensor)
    want%nothing = .true.
    allocate(want%start(0), want%shape(0))
  end function

  ! True (status set, naming the want in Fortran's terms) unless each want was made by
  ! mc_want_block, mc_want_shard or mc_want_nothing, names its tensor once, a block has one
  ! start and one extent per dimension (each at least 1), and a shard is one of its count. Else
  ! fills `c` with the C wants: each block reversed into row-major order, its starts 0-based. The
  ! library checks the rest against each version's manifest (a block outside its tensor, a
  ! tensor no version has).
  logical function bad_wants(wants, c, status)
    type(mc_want), intent(in) :: wants(:)
    type(wants_in_c), target, intent(out) :: c
    integer, intent(out) :: status
    character(len=:), allocatable :: hint
    integer :: i, j, n
    bad_wants = .true.
    allocate(c%names(size(wants)), c%wants(max(1, size(wants))), c%offsets(size(wants)), c%extents(size(wants)))
    do i = 1, size(wants)
      if (.not. allocated(wants(i)%tensor) .or. .not. allocated(wants(i)%start) .or. &
          .not. allocated(wants(i)%shape)) then
        status = module_failure(MC_ERR_INVALID_ARGUMENT, "mc_consumer_create: wants(" // &
            count_text(int(i, c_int64_t)) // ") was not made by mc_want_block (with integer start and shape), " // &
            "mc_want_shard or mc_want_nothing")
        return
      end if
      if (holds_nul("mc_consumer_create: wants", wants(i)%tensor, status)) return
      do j = 1, i - 1
        if (wants(j)%tensor == wants(i)%tensor) then
          hint = ""
          if (.not. (wants(i)%nothing .or. wants(i)%shard .or. wants(j)%nothing .or. wants(j)%shard)) &
              hint = " (want the block that spans both)"
          status = module_failure(MC_ERR_INVALID_ARGUMENT, "mc_consumer_create: wants(" // &
              count_text(int(j, c_int64_t)) // ") and wants(" // count_text(int(i, c_int64_t)) // &
              ") both name tensor '" // wants(i)%tensor // "'; one want per tensor" // hint)
          return
        end if
      end do
      n = size(wants(i)%start)
      if (size(wants(i)%shape) /= n) then
        status = module_failure(MC_ERR_INVALID_ARGUMENT, "mc_consumer_create: the block wanted of '" // &
            wants(i)%tensor // "' has " // count_text(int(n, c_int64_t)) // " start(s) and " // &
            count_text(int(size(wants(i)%shape), c_int64_t)) // " extent(s); give one of each per dimension")
        return
      end if
      ! The library refuses these too, but would show the block reversed and from 0.
      if (n == 0 .and. .not. (wants(i)%nothing .or. wants(i)%shard)) then
        status = module_failure(MC_ERR_INVALID_ARGUMENT, "mc_consumer_create: the block wanted of '" // &
            wants(i)%tensor // "' has no dimensions; give a start and an extent per dimension of the tensor")
        return
      end if
      if (any(wants(i)%shape < 1)) then
        status = module_failure(MC_ERR_INVALID_ARGUMENT, "mc_consumer_create: the block wanted of '" // &
            wants(i)%tensor // "' has extents " // extents_text(wants(i)%shape) // &
            "; each is at least 1 (want nothing of a tensor with mc_want_nothing)")
        return
      end if
      if (any(wants(i)%start < 1)) then
        status = module_failure(MC_ERR_INVALID_ARGUMENT, "mc_consumer_create: the block wanted of '" // &
            wants(i)%tensor // "' starts at " // extents_text(wants(i)%start) // "; starts count from 1")
        return
      end if
      call to_c(wants(i)%tensor, c%names(i)%chars)
      c%wants(i)%tensor = c_loc(c%names(i)%chars)
      c%wants(i)%dim = 0
      c%wants(i)%index = 0
      c%wants(i)%count = 0
      c%wants(i)%box_offsets = c_null_ptr
      c%wants(i)%box_extents = c_null_ptr
      c%wants(i)%ndim = 0
      c%wants(i)%box_count = 0
      if (wants(i)%nothing) then
        c%wants(i)%kind = MC_WANT_KIND_NOTHING
        cycle
      end if
      if (wants(i)%shard) then
        ! C takes both as size_t: a negative one would arrive near 2^64.
        if (wants(i)%count < 1 .or. wants(i)%index < 0 .or. wants(i)%index >= wants(i)%count) then
          status = module_failure(MC_ERR_INVALID_ARGUMENT, "mc_consumer_create: the shard wanted of '" // &
              wants(i)%tensor // "' is part " // count_text(int(wants(i)%index, c_int64_t)) // " of " // &
              count_text(int(wants(i)%count, c_int64_t)) // "; parts count from 0 to count - 1")
          return
        end if
        c%wants(i)%kind = MC_WANT_KIND_SHARD
        c%wants(i)%index = int(wants(i)%index, c_size_t)
        c%wants(i)%count = int(wants(i)%count, c_size_t)
        cycle
      end if
      c%offsets(i)%values = wants(i)%start(n:1:-1) - 1
      c%extents(i)%values = wants(i)%shape(n:1:-1)
      c%wants(i)%kind = MC_WANT_KIND_BOXES
      c%wants(i)%ndim = int(n, c_size_t)
      c%wants(i)%box_count = 1
      if (n > 0) then
        c%wants(i)%box_offsets = c_loc(c%offsets(i)%values)
        c%wants(i)%box_extents = c_loc(c%extents(i)%values)
      end if
    end do
    bad_wants = .false.
    status = MC_OK
  end function

  ! Where the consumer's group stands (all 0 for a consumer in no group). Any thread; a destroyed
  ! (or never created) consumer is MC_ERR_INVALID_ARGUMENT.
  integer function mc_consumer_get_group(consumer, state) result(status)
    type(mc_consumer), intent(in) :: consumer
    type(mc_group_state), intent(out) :: state
    type(mc_group_state_t) :: raw
    status = from_c(mc_consumer_get_group_c(consumer%handle, raw))
    if (status /= MC_OK) return
    state%group_version = raw%group_version
    state%prepared_version = raw%prepared_version
    state%waiting = raw%waiting /= 0
  end function

  ! What the consumer has installed, refused and received so far, and why it last failed. Any
  ! thread; a destroyed (or never created) consumer is MC_ERR_INVALID_ARGUMENT.
  integer function mc_consumer_get_stats(consumer, stats) result(status)
    type(mc_consumer), intent(in) :: consumer
    type(mc_consumer_stats), intent(out) :: stats
    type(mc_consumer_stats_t) :: raw
    status = from_c(mc_consumer_get_stats_c(consumer%handle, raw))
    if (status /= MC_OK) return
    stats%current_version = raw%current_version
    stats%versions_installed = raw%versions_installed
    stats%versions_rejected = raw%versions_rejected
    stats%transfers_aborted = raw%transfers_aborted
    stats%bad_messages = raw%bad_messages
    stats%reconnects = raw%reconnects
    stats%bytes_received = raw%bytes_received
    stats%last_update_latency_ns = raw%last_update_latency_ns
    stats%last_notify_latency_ns = raw%last_notify_latency_ns
    call from_c_chars(raw%last_error, stats%last_error)
  end function

  ! A NUL-terminated char array of a C struct into text (blank after the NUL; cut to len(text)).
  subroutine from_c_chars(chars, text)
    character(kind=c_char), intent(in) :: chars(:)
    character(len=*), intent(out) :: text
    integer :: i
    text = ""
    do i = 1, min(size(chars), len(text))
      if (chars(i) == c_null_char) exit
      text(i:i) = chars(i)
    end do
  end subroutine

  ! The version arriving now (0: none) and how much of it has landed, in bytes from its start:
  ! a large transfer's progress. Both 0 when the call fails.
  integer function mc_consumer_get_arriving(consumer, version, bytes) result(status)
    type(mc_consumer), intent(in) :: consumer
    integer(c_int64_t), intent(out) :: version, bytes
    version = 0
    bytes = 0
    status = from_c(mc_consumer_get_arriving_c(consumer%handle, version, bytes))
  end function

  ! Stops the consumer; views already acquired stay valid until released.
  subroutine mc_consumer_destroy(consumer)
    type(mc_consumer), intent(inout) :: consumer
    call mc_consumer_destroy_c(consumer%handle)
    consumer%handle = c_null_ptr
  end subroutine

  ! The newest installed version (view%handle stays c_null_ptr before the first one). A view
  ! that `view` still holds is released once the new one is in (kept if the call fails), so a
  ! loop may acquire into the same variable: the old versions' buffers go back to the consumer.
  integer function mc_consumer_acquire(consumer, view) result(status)
    type(mc_consumer), intent(in) :: consumer
    type(mc_view), intent(inout) :: view
    type(c_ptr) :: acquired
    acquired = c_null_ptr
    status = from_c(mc_consumer_acquire_c(consumer%handle, acquired))
    ! Before the first version the call succeeds with no view: the view held stays.
    if (status == MC_OK .and. c_associated(acquired)) call replace_view(view, acquired)
  end function

  ! Waits at most timeout_ms for version `version` or newer (MC_ERR_TIMEOUT otherwise); a view
  ! `view` held is released once the new one is in, as with mc_consumer_acquire.
  integer function mc_consumer_wait_for_version(consumer, version, timeout_ms, view) result(status)
    type(mc_consumer), intent(in) :: consumer
    integer(c_int64_t), intent(in) :: version, timeout_ms
    type(mc_view), intent(inout) :: view
    type(c_ptr) :: acquired
    acquired = c_null_ptr
    ! The C ABI's version is unsigned: -1 became 2^64 - 1, a version that never comes.
    if (version < 0) then
      status = module_failure(MC_ERR_INVALID_ARGUMENT, "mc_consumer_wait_for_version: version is negative")
      return
    end if
    status = from_c(mc_consumer_wait_for_version_c(consumer%handle, version, timeout_ms, acquired))
    if (status == MC_OK) call replace_view(view, acquired)
  end function

  ! With intent(out) the view a variable held was lost, never released: after `buffers` such
  ! acquires every receive buffer was held and no version could arrive again.
  subroutine replace_view(view, acquired)
    type(mc_view), intent(inout) :: view
    type(c_ptr), intent(in) :: acquired
    if (c_associated(view%handle)) call mc_view_release_c(view%handle)
    view%handle = acquired
  end subroutine

  ! Ends every mc_consumer_wait_for_version under way and every later one with MC_ERR_STATE;
  ! versions still arrive and mc_consumer_acquire works. Call it before destroying a waited-on consumer.
  integer function mc_consumer_cancel_waits(consumer) result(status)
    type(mc_consumer), intent(in) :: consumer
    status = from_c(mc_consumer_cancel_waits_c(consumer%handle))
  end function

  ! ---- views ---------------------------------------------------------------------------

  ! Gives the version back; release every view (its bytes stay unchanged until then).
  subroutine mc_view_release(view)
    type(mc_view), intent(inout) :: view
    call mc_view_release_c(view%handle)
    view%handle = c_null_ptr
  end subroutine

  integer(c_int64_t) function mc_view_version(view)
    type(mc_view), intent(in) :: view
    mc_view_version = mc_view_version_c(view%handle)
  end function

  integer(c_int64_t) function mc_view_step(view)
    type(mc_view), intent(in) :: view
    mc_view_step = mc_view_step_c(view%handle)
  end function

  ! The metadata value published with the view's version under `key`, blank-padded into `value`.
  ! MC_ERR_INVALID_ARGUMENT when the version has no such key, or when `value` is shorter than the
  ! value (the message says how many characters it needs; `value` is then left blank); MC_ERR_STATE
  ! for a view that holds no version.
  integer function mc_view_metadata(view, key, value) result(status)
    type(mc_view), intent(in) :: view
    character(len=*), intent(in) :: key
    character(len=*), intent(out) :: value
    character(kind=c_char), allocatable, target :: key_c(:)
    character(len=:), allocatable :: found
    type(c_ptr) :: text
    value = ""
    if (holds_nul("mc_view_metadata", key, status)) return
    if (holds_no_version("mc_view_metadata", view, status)) return
    call to_c(key, key_c)
    text = mc_view_metadata_get_c(view%handle, c_loc(key_c))
    if (.not. c_associated(text)) then
      status = module_failure(MC_ERR_INVALID_ARGUMENT, "mc_view_metadata: version " // &
          count_text(mc_view_version_c(view%handle)) // " has no metadata '" // trim(key) // "'")
      return
    end if
    found = f_string(text)
    if (len(found) > len(value)) then
      status = module_failure(MC_ERR_INVALID_ARGUMENT, "mc_view_metadata: the value of '" // trim(key) // "' has " // &
          count_text(int(len(found), c_int64_t)) // " characters; the variable holds " // count_text(int(len(value), c_int64_t)))
      return
    end if
    value = found
    status = MC_OK
  end function

  ! The number of tensors in the view's version (0 for a view that holds none).
  integer function mc_view_tensor_count(view) result(count)
    type(mc_view), intent(in) :: view
    count = int(mc_view_tensor_count_c(view%handle))
  end function

  ! Tensor `index` (1 to mc_view_tensor_count, the producer's registration order): its name, the
  ! shape of the Fortran array mc_view_copy fills with it (the tensor's shape reversed, see Array
  ! order; size 0 for a scalar) and its dtype (MC_DTYPE_*), so that a consumer can allocate that
  ! array without knowing the model ahead. `name` must be long enough for the name (an error
  ! says how long), and is blank-padded. For a consumer that keeps a block (mc_want_block),
  ! `shape` is the block's; global_shape and global_start (optional) say where it lies in the
  ! whole tensor (Fortran order, from 1). A tensor kept whole: its shape, and starts of 1.
  integer function mc_view_tensor(view, index, name, shape, dtype, global_shape, global_start) result(status)
    type(mc_view), intent(in) :: view
    integer, intent(in) :: index
    character(len=*), intent(out) :: name
    integer(c_int64_t), allocatable, intent(out) :: shape(:)
    integer(c_int), intent(out), optional :: dtype
    integer(c_int64_t), allocatable, intent(out), optional :: global_shape(:), global_start(:)
    type(mc_tensor_info_t) :: info
    integer(c_int64_t), pointer :: extents(:), offset(:), whole(:)
    type(c_ptr) :: offset_c, whole_c
    integer(c_size_t) :: box_ndim
    character(len=:), allocatable :: found
    integer :: count
    name = ""
    allocate(shape(0))
    if (present(dtype)) dtype = -1
    if (present(global_shape)) allocate(global_shape(0))
    if (present(global_start)) allocate(global_start(0))
    if (holds_no_version("mc_view_tensor", view, status)) return
    count = mc_view_tensor_count(view)
    if (index < 1 .or. index > count) then
      status = module_failure(MC_ERR_INVALID_ARGUMENT, "mc_view_tensor: index " // count_text(int(index, c_int64_t)) // &
          " is outside 1 to " // count_text(int(count, c_int64_t)) // " (the tensors of version " // &
          count_text(mc_view_version_c(view%handle)) // ")")
      return
    end if
    status = from_c(mc_view_tensor_at_c(view%handle, int(index - 1, c_size_t), info))
    if (status /= MC_OK) return
    found = f_string(info%name)
    if (len(found) > len(name)) then
      status = module_failure(MC_ERR_INVALID_ARGUMENT, "mc_view_tensor: tensor " // count_text(int(index, c_int64_t)) // &
          "'s name '" // found // "' is longer than the variable (character(len=" // &
          count_text(int(len(name), c_int64_t)) // "))")
      return
    end if
    name = found
    deallocate(shape)
    if (info%ndim > 0) then
      call c_f_pointer(info%shape, extents, [int(info%ndim)])
      shape = extents(size(extents):1:-1)
    else
      allocate(shape(0))
    end if
    if (present(dtype)) dtype = info%dtype
    if (.not. (present(global_shape) .or. present(global_start))) return
    status = from_c(mc_view_tensor_box_c(view%handle, int(index - 1, c_size_t), offset_c, whole_c, box_ndim))
    if (status /= MC_OK) then  ! as every failure above leaves them
      name = ""
      deallocate(shape)
      allocate(shape(0))
      if (present(dtype)) dtype = -1
      return
    end if
    if (present(global_shape)) deallocate(global_shape)
    if (present(global_start)) deallocate(global_start)
    if (box_ndim == 0) then  ! kept whole
      if (present(global_shape)) global_shape = shape
      if (present(global_start)) allocate(global_start(size(shape)), source=1_c_int64_t)
      return
    end if
    call c_f_pointer(offset_c, offset, [int(box_ndim)])
    call c_f_pointer(whole_c, whole, [int(box_ndim)])
    if (present(global_shape)) global_shape = whole(size(whole):1:-1)
    if (present(global_start)) global_start = offset(size(offset):1:-1) + 1
  end function

  ! True (status MC_ERR_STATE, naming `what`) for a view that holds no version.
  logical function holds_no_version(what, view, status)
    character(len=*), intent(in) :: what
    type(mc_view), intent(in) :: view
    integer, intent(out) :: status
    status = MC_OK
    holds_no_version = .not. c_associated(view%handle)
    if (holds_no_version) status = module_failure(MC_ERR_STATE, what // ": the view holds no version (acquired " // &
        "before the first one was installed, or released)")
  end function

  ! Checks that tensor `name` has `dtype` and the reverse of `extents`, then copies its bytes.
  integer function copy_raw(view, name, dtype, extents, destination) result(status)
    type(mc_view), intent(in) :: view
    character(len=*), intent(in) :: name
    integer(c_int), intent(in) :: dtype
    integer(c_int64_t), intent(in) :: extents(:)
    type(c_ptr), intent(in) :: destination
    character(kind=c_char), allocatable, target :: name_c(:)
    type(mc_tensor_info_t) :: info
    type(c_ptr) :: ignored
    integer(c_int64_t), pointer :: shape(:)
    integer(c_int64_t), target :: no_extents(0)
    character(len=:), allocatable :: hint
    integer :: n
    logical :: same_shape
    if (holds_nul("mc_view_copy", name, status)) return
    if (holds_no_version("mc_view_copy", view, status)) return
    call to_c(name, name_c)
    status = from_c(mc_view_find_tensor_c(view%handle, c_loc(name_c), info))
    if (status /= MC_OK) return
    ! A deallocated array keeps its old extents, which passed the shape check: the copy wrote
    ! through a null address.
    if (info%size_bytes > 0 .and. .not. c_associated(destination)) then
      status = module_failure(MC_ERR_INVALID_ARGUMENT, "mc_view_copy: the array for '" // trim(name) // &
          "' is not allocated (or a pointer not associated)")
      return
    end if
    n = size(extents)
    if (info%dtype /= dtype) then
      hint = ""
      if (info%dtype == MC_DTYPE_F16 .or. info%dtype == MC_DTYPE_BF16) &
          hint = "; a consumer created with as_f32=.true. holds f16 and bf16 tensors as f32"
      status = module_failure(MC_ERR_LAYOUT_MISMATCH, "mc_view_copy: tensor '" // trim(name) // "' holds " // &
          f_string(mc_dtype_name_c(info%dtype)) // " elements; the Fortran array's are " // &
          f_string(mc_dtype_name_c(dtype)) // " (f32, f64, i32 and i64 tensors copy into real(c_float), " // &
          "real(c_double), integer(c_int32_t) and integer(c_int64_t) arrays; others into none" // hint // ")")
      return
    end if
    if (info%ndim > 0) then
      call c_f_pointer(info%shape, shape, [int(info%ndim)])
    else
      shape => no_extents  ! a scalar's shape may be a null pointer
    end if
    ! The ranks first: Fortran need not stop at a true left operand of .or., and comparing
    ! shapes of two ranks read past the shorter one.
    same_shape = int(info%ndim) == n
    if (same_shape) same_shape = all(shape == extents(n:1:-1))
    if (.not. same_shape) then
      status = module_failure(MC_ERR_LAYOUT_MISMATCH, "mc_view_copy: tensor '" // trim(name) // "' has shape " // &
          shape_text(shape) // "; the Fortran array must have the reversed shape " // &
          extents_text(shape(size(shape):1:-1)) // ", not " // extents_text(extents))
      return
    end if
    ignored = c_memcpy(destination, info%data, info%size_bytes)
    status = MC_OK
  end function

  integer function copy_f32(view, name, array) result(status)
    type(mc_view), intent(in) :: view
    character(len=*), intent(in) :: name
    real(c_float), dimension(..), target, contiguous, intent(inout) :: array
    status = copy_raw(view, name, MC_DTYPE_F32, shape(array, kind=c_int64_t), c_loc(array))
  end function
  integer function copy_f64(view, name, array) result(status)
    type(mc_view), intent(in) :: view
    character(len=*), intent(in) :: name
    real(c_double), dimension(..), target, contiguous, intent(inout) :: array
    status = copy_raw(view, name, MC_DTYPE_F64, shape(array, kind=c_int64_t), c_loc(array))
  end function
  integer function copy_i32(view, name, array) result(status)
    type(mc_view), intent(in) :: view
    character(len=*), intent(in) :: name
    integer(c_int32_t), dimension(..), target, contiguous, intent(inout) :: array
    status = copy_raw(view, name, MC_DTYPE_I32, shape(array, kind=c_int64_t), c_loc(array))
  end function
  integer function copy_i64(view, name, array) result(status)
    type(mc_view), intent(in) :: view
    character(len=*), intent(in) :: name
    integer(c_int64_t), dimension(..), target, contiguous, intent(inout) :: array
    status = copy_raw(view, name, MC_DTYPE_I64, shape(array, kind=c_int64_t), c_loc(array))
  end function
end module modelcast
