! The Fortran side of the Fortran exchange test (fortran_exchange_test.cpp starts it): a
! producer of four arrays of different types and ranks, and a Fortran consumer of its own
! model that reads every version back through mc_view_copy; modelcast's log goes through a
! Fortran handler; then the online scheduler runs over a known loss curve. Protocol on
! stdout/stdin: prints "sizes <bytes of each bind(c) mirror of a C ABI struct>", "endpoint <E>", then for each version "published <v>" and waits for a
! line on stdin before the next publish; then "scheduler <steps>" and "fortran: ok". Any
! failure: "FAILED ..." and exit 1.
module fortran_log_counter
  use, intrinsic :: iso_c_binding
  use modelcast, only: mc_string, MC_LOG_INFO
  implicit none
contains
  ! Counts the producer's "serving on" line at info level; user_data is the counter.
  subroutine count_serving(level, component, message, user_data) bind(c)
    integer(c_int), value :: level
    type(c_ptr), value :: component, message, user_data
    integer(c_int), pointer :: counter
    call c_f_pointer(user_data, counter)
    if (level /= MC_LOG_INFO) return
    if (mc_string(component) /= "modelcast.producer") return
    if (index(mc_string(message), "serving on") > 0) counter = counter + 1
  end subroutine
end module fortran_log_counter

program fortran_producer
  use, intrinsic :: iso_c_binding
  use, intrinsic :: iso_fortran_env, only: output_unit
  use modelcast
  use fortran_log_counter
  implicit none
  integer, parameter :: n = 3, m = 4, versions = 3
  real(c_float), target :: w(n, m), w_back(n, m), w_wrong(m, n), w_flat(n * m)
  real(c_double), target :: b(5), b_back(5)
  integer(c_int32_t), target :: k(2, 3, 4), k_back(2, 3, 4)
  integer(c_int64_t), target :: s(1), s_back(1)
  type(mc_producer) :: producer
  type(mc_consumer) :: consumer
  type(mc_view) :: view
  integer(c_int64_t) :: version, copied, persisted, persist_failures, persist_skipped
  integer(c_int64_t) :: refused_joins, refused_peers
  character(len=64) :: line
  character(len=16) :: sim_time
  character(len=3) :: short
  integer :: v
  integer(c_int), target :: serving_lines = 0
  character(len=40) :: public_key
  character(len=4096) :: key_directory

  call print_struct_sizes()
  call check(mc_set_log_handler(count_serving, c_loc(serving_lines)), "mc_set_log_handler")
  call check(mc_set_log_level(MC_LOG_INFO), "mc_set_log_level")

  ! A missing .pub file is refused by name (the key itself is loaded in the C ABI's tests).
  if (mc_load_public_key("/nonexistent/trainer.key.pub", public_key) /= MC_ERR_INVALID_ARGUMENT) then
    call fail("mc_load_public_key of a missing file returned", 0)
  end if
  if (index(mc_last_error(), "trainer.key.pub") == 0) call fail("mc_load_public_key's error names no file", 0)
  call check(mc_producer_create(producer, "fortran"), "mc_producer_create")
  call check(mc_producer_register(producer, "w", w), "register w")
  call check(mc_producer_register(producer, "b", b), "register b")
  call check(mc_producer_register(producer, "k", k), "register k")
  call check(mc_producer_register(producer, "s", s), "register s")
  write(output_unit, '(a,a)') "endpoint ", mc_producer_endpoint(producer)
  flush(output_unit)
  call check(mc_consumer_create(consumer, mc_producer_endpoint(producer), "fortran"), "mc_consumer_create")
  call check(mc_producer_wait_for_consumers(producer, 2, 30000_c_int64_t), "wait for both consumers")

  do v = 1, versions
    call fill(v)
    ! Metadata travels with the version as text (a simulation's time, the loss).
    write(sim_time, '(f0.2)') 0.25 * v
    call check(mc_producer_publish(producer, int(100 * v, c_int64_t), version, &
                                   metadata_keys=[character(len=8) :: "sim_time", "regime"], &
                                   metadata_values=[character(len=16) :: sim_time, "laminar"]), "mc_producer_publish")
    if (version /= v) call fail("publish gave version", int(version))
    ! The Fortran consumer gets the same arrays back, in the same Fortran order.
    call check(mc_consumer_wait_for_version(consumer, version, 30000_c_int64_t, view), "wait_for_version")
    if (mc_view_version(view) /= version) call fail("view version differs at version", v)
    if (mc_view_step(view) /= 100 * v) call fail("view step differs at version", v)
    call check(mc_view_metadata(view, "sim_time", line), "mc_view_metadata sim_time")
    if (line /= sim_time) call fail("metadata sim_time reads " // trim(line) // " at version", v)
    call check(mc_view_metadata(view, "regime", line), "mc_view_metadata regime")
    if (line /= "laminar") call fail("metadata regime reads " // trim(line) // " at version", v)
    if (mc_view_metadata(view, "nope", line) /= MC_ERR_INVALID_ARGUMENT) call fail("absent metadata was found", v)
    if (index(mc_last_error(), "has no metadata 'nope'") == 0) call fail("unclear absent metadata: " // mc_last_error(), v)
    if (mc_view_metadata(view, "regime", short) /= MC_ERR_INVALID_ARGUMENT) call fail("metadata cut to 3 characters", v)
    if (index(mc_last_error(), "'regime' has 7 characters; the variable holds 3") == 0) &
        call fail("unclear short metadata variable: " // mc_last_error(), v)
    if (v == 1) call tensors_are_listed(view)
    call check(mc_view_copy(view, "w", w_back), "copy w")
    call check(mc_view_copy(view, "b", b_back), "copy b")
    call check(mc_view_copy(view, "k", k_back), "copy k")
    call check(mc_view_copy(view, "s", s_back), "copy s")
    if (any(w_back /= w) .or. any(b_back /= b) .or. any(k_back /= k) .or. any(s_back /= s)) &
        call fail("the Fortran consumer read other values at version", v)
    ! The shape rule is enforced: w(n, m) does not fit a w(m, n) array, nor f32 an f64 one.
    if (mc_view_copy(view, "w", w_wrong) /= MC_ERR_LAYOUT_MISMATCH) call fail("copy into w(m, n) was accepted", v)
    if (index(mc_last_error(), "reversed shape (3, 4), not (4, 3)") == 0) &
        call fail("unclear shape error: " // mc_last_error(), v)
    ! Of another rank: its shape was compared with the tensor's element by element, past the
    ! shorter one (a bounds-checked build stopped there).
    if (mc_view_copy(view, "w", w_flat) /= MC_ERR_LAYOUT_MISMATCH) call fail("copy into w(n * m) was accepted", v)
    if (index(mc_last_error(), "reversed shape (3, 4), not (12)") == 0) &
        call fail("unclear rank error: " // mc_last_error(), v)
    if (mc_view_copy(view, "w", b_back) /= MC_ERR_LAYOUT_MISMATCH) call fail("copy f32 into f64 was accepted", v)
    if (mc_view_copy(view, "nope", b_back) /= MC_ERR_INVALID_ARGUMENT) call fail("missing tensor accepted", v)
    if (index(mc_last_error(), "nope") == 0) call fail("unclear missing-tensor error: " // mc_last_error(), v)
    call mc_view_release(view)
    write(output_unit, '(a,i0)') "published ", version
    flush(output_unit)
    read(*, '(a)') line  ! the C++ consumer has checked this version
  end do
  ! Each version changed every array and went into a slot of its own: whole copies. (Counters
  ! start at -1: a binding that wrote nothing would leave them so.)
  copied = -1
  persisted = -1
  persist_failures = -1
  persist_skipped = -1
  call check(mc_producer_copy_stats(producer, copied), "mc_producer_copy_stats")
  if (copied /= versions * (c_sizeof(w) + c_sizeof(b) + c_sizeof(k) + c_sizeof(s))) &
      call fail("publish copied other than the whole model per version, bytes:", int(copied))
  call check(mc_producer_persist_stats(producer, persisted, persist_failures, persist_skipped), &
             "mc_producer_persist_stats")
  if (persisted /= 0 .or. persist_failures /= 0 .or. persist_skipped /= 0) &
      call fail("persist counters moved without the persist option", int(persisted))
  ! Its one consumer joined: nobody was turned away.
  refused_joins = -1
  refused_peers = -1
  call check(mc_producer_refusal_stats(producer, refused_joins, refused_peers), "mc_producer_refusal_stats")
  if (refused_joins /= 0 .or. refused_peers /= 0) &
      call fail("refusal counters moved though nobody was refused", int(refused_joins))
  ! Cancelled waits end at once with MC_ERR_STATE, not after their timeout; versions are still
  ! readable. (A binding that did not cancel would wait the full minute and fail here.)
  call check(mc_consumer_cancel_waits(consumer), "mc_consumer_cancel_waits")
  if (mc_consumer_wait_for_version(consumer, int(versions + 1, c_int64_t), 60000_c_int64_t, view) /= MC_ERR_STATE) &
      call fail("a cancelled wait_for_version did not return MC_ERR_STATE", 0)
  call check(mc_consumer_acquire(consumer, view), "acquire after cancel_waits")
  if (mc_view_version(view) /= versions) call fail("acquire after cancel_waits gave version", int(mc_view_version(view)))
  call mc_view_release(view)
  call check(mc_producer_cancel_waits(producer), "mc_producer_cancel_waits")
  if (mc_producer_wait_for_consumers(producer, 99, 60000_c_int64_t) /= MC_ERR_STATE) &
      call fail("a cancelled wait_for_consumers did not return MC_ERR_STATE", 0)
  call mc_consumer_destroy(consumer)
  call mc_producer_destroy(producer)
  call check(mc_set_log_handler(), "mc_set_log_handler (back to stderr)")
  if (serving_lines /= 1) call fail("log lines 'serving on' seen by the Fortran handler:", int(serving_lines))
  call misuse_is_refused()
  call a_view_variable_is_reused()
  call consumer_stats_say_what_happened()
  call ranks_publish_pieces()
  call half_precision_as_f32()
  call group_members_switch_together()
  if (command_argument_count() >= 1) then
    call get_command_argument(1, key_directory)
    call keyed_exchange(trim(key_directory))
  end if
  call run_scheduler(MC_SCHEDULER_INLINE, "scheduler")
  call run_scheduler(MC_SCHEDULER_BACKGROUND, "scheduler-background")
  write(output_unit, '(a,a)') "fortran: ok, library ", mc_version_string()

contains

  ! The online scheduler over the curve loss = 2 + 8 / (1 + step / 300), a step taking 0.5 s,
  ! steps 100..3000 by 100, warm-up 500, c = 2 s, d = 1 s, in `work_mode` (waiting for the
  ! worker after each decision, so the answers are reproducible); prints `label` and its publish
  ! steps for the C++ side to compare with its own scheduler's.
  ! An MPI code's field split by columns over two producer ranks (here in one process): each
  ! rank registers its columns as a piece with its place in the whole, rank 0 is told rank 1's
  ! endpoint, and a Fortran consumer told rank 0's copies the whole field, every element where
  ! the whole array has it, once both ranks published the step; another keeps a block across
  ! both ranks' pieces. Pieces and wants the module must refuse (outside the whole, a start of 0,
  ! too few starts, two wants of a tensor) and bad ranks are refused by name.
  subroutine ranks_publish_pieces()
    integer, parameter :: rows = 3, cols = 5
    real(c_double), target :: field(rows, cols), left(rows, 3), right(rows, 2), back(rows, cols), block(rows, 4), &
        shard_back(rows, 2)
    integer(c_int64_t), target :: steps(1), steps_back(1)
    type(mc_producer) :: rank0, rank1, refused
    type(mc_consumer) :: c, server, half
    character(len=16) :: name
    character(len=:), allocatable :: endpoint0
    integer(c_int64_t), allocatable :: extents(:), whole(:), start(:)
    type(mc_view) :: view
    character(len=256) :: endpoints(2)
    integer :: i, j, step
    ! A run id read from an unset variable is blank: refused, not taken as none.
    if (mc_producer_create(refused, "sharded", rank=1, rank_count=2, run_id=" ") /= MC_ERR_INVALID_ARGUMENT) &
        call fail("a blank run_id was accepted", 0)
    if (index(mc_last_error(), "run_id is blank") == 0) call fail("unclear blank run_id: " // mc_last_error(), 0)
    call check(mc_producer_create(rank1, "sharded", rank=1, rank_count=2, run_id="sim.1"), "mc_producer_create (rank 1)")
    endpoints(1) = ""  ! rank 0's own: not read
    endpoints(2) = mc_producer_endpoint(rank1)
    if (mc_producer_create(refused, "sharded", rank=0, rank_count=2) /= MC_ERR_INVALID_ARGUMENT) &
        call fail("rank 0 of 2 was created without rank_endpoints", 0)
    if (index(mc_last_error(), "rank_endpoints") == 0) call fail("unclear missing rank_endpoints: " // mc_last_error(), 0)
    if (mc_producer_create(refused, "sharded", rank=-1, rank_count=2) /= MC_ERR_INVALID_ARGUMENT) &
        call fail("rank -1 was accepted", 0)
    if (index(mc_last_error(), "rank is -1") == 0) call fail("unclear negative rank: " // mc_last_error(), 0)
    if (mc_producer_create(refused, "sharded", rank_count=0) /= MC_ERR_INVALID_ARGUMENT) &
        call fail("rank_count 0 was accepted", 0)
    if (index(mc_last_error(), "rank_count is 0; at least 1") == 0) call fail("unclear rank_count 0: " // mc_last_error(), 0)
    if (mc_producer_create(refused, "sharded", rank_count=-1) /= MC_ERR_INVALID_ARGUMENT) &
        call fail("rank_count -1 was accepted", 0)
    if (index(mc_last_error(), "rank_count is -1") == 0) call fail("unclear rank_count -1: " // mc_last_error(), 0)
    ! The only rank of its model must publish its tensors whole: no other rank has the rest.
    call check(mc_producer_create(refused, "single"), "mc_producer_create (single)")
    if (mc_producer_register_piece(refused, "half", right, global_shape=[rows, cols], global_start=[1, 4]) &
        /= MC_ERR_INVALID_ARGUMENT) call fail("a piece of the only rank was accepted", 0)
    if (index(mc_last_error(), "'half' is elements (1:3, 4:5) of a tensor of shape (3, 5), but this producer is " // &
              "its model's only rank (rank_count 1)") == 0) call fail("unclear piece of the only rank: " // mc_last_error(), 0)
    call mc_producer_destroy(refused)
    call check(mc_producer_create(rank0, "sharded", rank=0, rank_count=2, rank_endpoints=endpoints, run_id="sim.1"), &
        "mc_producer_create (rank 0)")
    call check(mc_producer_register_piece(rank0, "field", left, global_shape=[rows, cols], global_start=[1, 1]), &
        "register_piece (rank 0)")
    call check(mc_producer_register(rank0, "steps", steps), "register steps (rank 0's alone)")
    ! Places of either integer kind (c_int64_t for an extent past 2^31 - 1); other types are refused.
    if (mc_producer_register_piece(rank1, "field", right, global_shape=[rows, cols], global_start=[1.0, 4.0]) &
        /= MC_ERR_INVALID_ARGUMENT) call fail("a real global_start was accepted", 0)
    if (index(mc_last_error(), "are integer arrays (default kind or c_int64_t)") == 0) &
        call fail("unclear real global_start: " // mc_last_error(), 0)
    call check(mc_producer_register_piece(rank1, "field", right, global_shape=[integer(c_int64_t) :: rows, cols], &
                                          global_start=[integer(c_int64_t) :: 1, 4]), "register_piece (rank 1)")
    if (mc_producer_register_piece(rank1, "over", right, global_shape=[rows, cols], global_start=[1, 5]) &
        /= MC_ERR_INVALID_ARGUMENT) call fail("a piece past the whole tensor's last column was accepted", 0)
    if (index(mc_last_error(), "'over' would be elements (1:3, 5:6) of a tensor of shape (3, 5)") == 0) &
        call fail("unclear piece outside its tensor: " // mc_last_error(), 0)
    if (mc_producer_register_piece(rank1, "zero", right, global_shape=[rows, cols], global_start=[0, 4]) &
        /= MC_ERR_INVALID_ARGUMENT) call fail("a start of 0 was accepted", 0)
    if (index(mc_last_error(), "global_start counts from 1") == 0) call fail("unclear start of 0: " // mc_last_error(), 0)
    if (mc_producer_register_piece(rank1, "flat", right, global_shape=[rows, cols], global_start=[4]) &
        /= MC_ERR_INVALID_ARGUMENT) call fail("one start for a 2-D piece was accepted", 0)
    if (index(mc_last_error(), "has 2 dimension(s), global_shape 2 and global_start 1") == 0) &
        call fail("unclear count of starts: " // mc_last_error(), 0)
    call check(mc_consumer_create(c, mc_producer_endpoint(rank0), "sharded"), "mc_consumer_create (sharded)")
    ! A server rank keeps columns 2 to 5 (two from rank 0, both of rank 1's) and nothing else.
    call check(mc_consumer_create(server, mc_producer_endpoint(rank0), "sharded", &
                                  wants=[mc_want_block("field", start=[integer(c_int64_t) :: 1, 2], shape=[rows, 4]), &
                                         mc_want_nothing("*")]), "mc_consumer_create (a block)")
    ! Another keeps part 1 of 2 (from 0) of every tensor along the last dimension: columns 4 and 5
    ! of 5 (parts of ceil(5 / 2) columns), and of `steps` (one element) its part 1, which is empty.
    call check(mc_consumer_create(half, mc_producer_endpoint(rank0), "sharded", wants=[mc_want_shard("*", 1, 2)]), &
        "mc_consumer_create (a shard)")
    ! Wants refused when the consumer is created, each with the words that name the problem.
    endpoint0 = mc_producer_endpoint(rank0)
    call want_is_refused(endpoint0, [mc_want_shard("field", 2, 2)], "is part 2 of 2; parts count from 0 to count - 1")
    call want_is_refused(endpoint0, [mc_want_block("field", [1, 1], [rows, 1]), mc_want_nothing("field")], &
                         "wants(1) and wants(2) both name tensor 'field'")
    call want_is_refused(endpoint0, [mc_want_block("field", [0, 1], [rows, 1])], "starts at (0, 1); starts count from 1")
    call want_is_refused(endpoint0, [mc_want_block("field", [1.0, 1.0], [rows, 1])], &
                         "wants(1) was not made by mc_want_block (with integer start and shape)")
    call want_is_refused(endpoint0, [mc_want_block("field", [1, 1], [rows, 0])], "has extents (3, 0); each is at least 1")
    call want_is_refused(endpoint0, [mc_want_block("field", [integer ::], [integer ::])], "has no dimensions")
    call want_is_refused(endpoint0, [mc_want_block("field", [1, 1], [rows])], "has 2 start(s) and 1 extent(s)")
    do step = 1, 2
      do j = 1, cols
        do i = 1, rows
          field(i, j) = 1000 * step + 10 * i + j
        end do
      end do
      left = field(:, 1:3)
      right = field(:, 4:5)
      steps(1) = 10 * step
      call check(mc_producer_publish(rank0, 10 * step), "publish (rank 0)")
      call check(mc_producer_publish(rank1, 10 * step), "publish (rank 1)")
      call check(mc_consumer_wait_for_version(c, int(step, c_int64_t), 30000_c_int64_t, view), "wait (sharded)")
      if (mc_view_step(view) /= 10 * step) call fail("the sharded view's step is", int(mc_view_step(view)))
      back = 0
      call check(mc_view_copy(view, "field", back), "copy field")
      if (any(back /= field)) call fail("the field assembled from two ranks differs at step", 10 * step)
      if (mc_view_tensor_count(view) /= 2) call fail("the whole model's tensors:", mc_view_tensor_count(view))
      steps_back = 0
      call check(mc_view_copy(view, "steps", steps_back), "copy steps")
      if (steps_back(1) /= 10 * step) call fail("steps reads", int(steps_back(1)))
      do i = 1, 2
        call check(mc_view_tensor(view, i, name, extents, global_shape=whole, global_start=start), "mc_view_tensor (whole)")
        if (name /= "field") cycle
        if (size(whole) /= 2 .or. size(start) /= 2) call fail("the whole field's place has dimensions:", size(whole))
        if (any(whole /= [rows, cols]) .or. any(start /= [1, 1])) call fail("the whole field is not listed as such", 0)
      end do
      call mc_view_release(view)
      call check(mc_consumer_wait_for_version(server, int(step, c_int64_t), 30000_c_int64_t, view), "wait (a block)")
      if (mc_view_tensor_count(view) /= 1) call fail("tensors kept besides the block:", mc_view_tensor_count(view) - 1)
      call check(mc_view_tensor(view, 1, name, extents, global_shape=whole, global_start=start), "mc_view_tensor (block)")
      if (size(extents) /= 2 .or. size(whole) /= 2 .or. size(start) /= 2) call fail("the block has dimensions:", size(start))
      if (name /= "field" .or. any(extents /= [rows, 4]) .or. any(whole /= [rows, cols]) .or. any(start /= [1, 2])) &
          call fail("the block is listed with another place at step", 10 * step)
      block = 0
      call check(mc_view_copy(view, "field", block), "copy the block")
      if (any(block /= field(:, 2:5))) call fail("the block of columns 2 to 5 differs at step", 10 * step)
      call mc_view_release(view)
      call check(mc_consumer_wait_for_version(half, int(step, c_int64_t), 30000_c_int64_t, view), "wait (a shard)")
      do i = 1, mc_view_tensor_count(view)
        call check(mc_view_tensor(view, i, name, extents, global_start=start), "mc_view_tensor (shard)")
        if (name /= "field") cycle
        if (size(extents) /= 2 .or. size(start) /= 2) call fail("the shard has dimensions:", size(start))
        if (any(extents /= [rows, 2]) .or. any(start /= [1, 4])) call fail("the shard is listed with another place", 0)
      end do
      shard_back = 0
      call check(mc_view_copy(view, "field", shard_back), "copy the shard")
      if (any(shard_back /= field(:, 4:5))) call fail("the shard of columns 4 and 5 differs at step", 10 * step)
      call mc_view_release(view)
    end do
    call mc_consumer_destroy(half)
    call mc_consumer_destroy(server)
    call mc_consumer_destroy(c)
    call mc_producer_destroy(rank0)
    call mc_producer_destroy(rank1)
    write(output_unit, '(a)') "sharded: ok"
    flush(output_unit)
  end subroutine

  ! Two consumers in one group (a sharded server's ranks): the first, alone, serves nothing and
  ! says its group waits; once the second joins, both serve the version and say their group
  ! switched to it. A consumer in no group reads zeros; a bad group size is refused.
  subroutine group_members_switch_together()
    real(c_float), target :: x(3)
    type(mc_producer) :: p
    type(mc_consumer) :: first, second, outsider, refused_consumer
    type(mc_view) :: view
    type(mc_group_state) :: state
    integer(c_int64_t) :: version, clock, rate, deadline
    x = [1.0, 2.0, 3.0]
    call check(mc_producer_create(p, "group"), "mc_producer_create (group)")
    call check(mc_producer_register(p, "x", x), "register x (group)")
    call check(mc_consumer_create(first, mc_producer_endpoint(p), "group", group="tp", group_size=2), &
        "mc_consumer_create (first member)")
    call check(mc_producer_publish(p, 1, version), "publish (group)")
    call system_clock(clock, rate)
    deadline = clock + 30 * rate
    do
      call check(mc_consumer_get_group(first, state), "mc_consumer_get_group (alone)")
      if (state%waiting) exit
      call system_clock(clock)
      if (clock > deadline) call fail("a lone group member did not say its group waits within 30 s", 0)
    end do
    if (state%group_version /= 0) call fail("a lone member's group switched to version", int(state%group_version))
    call check(mc_consumer_acquire(first, view), "acquire (alone)")
    if (mc_view_version(view) /= 0) call fail("a lone group member serves version", int(mc_view_version(view)))
    call check(mc_consumer_create(second, mc_producer_endpoint(p), "group", group="tp", group_size=2), &
        "mc_consumer_create (second member)")
    call check(mc_consumer_wait_for_version(first, version, 30000_c_int64_t, view), "wait (first member)")
    call check(mc_consumer_wait_for_version(second, version, 30000_c_int64_t, view), "wait (second member)")
    call mc_view_release(view)
    call check(mc_consumer_get_group(second, state), "mc_consumer_get_group (together)")
    if (state%group_version /= version .or. state%prepared_version /= 0 .or. state%waiting) &
        call fail("the group does not say it switched; group version", int(state%group_version))
    call check(mc_consumer_create(outsider, mc_producer_endpoint(p), "group"), "mc_consumer_create (outsider)")
    state%group_version = -1
    call check(mc_consumer_get_group(outsider, state), "mc_consumer_get_group (outsider)")
    if (state%group_version /= 0 .or. state%waiting) call fail("a consumer in no group reads group version", &
                                                               int(state%group_version))
    if (mc_consumer_create(refused_consumer, mc_producer_endpoint(p), "group", group="tp", group_size=-2) &
        /= MC_ERR_INVALID_ARGUMENT) call fail("group_size -2 was accepted", 0)
    if (index(mc_last_error(), "group_size is -2") == 0) call fail("unclear group_size: " // mc_last_error(), 0)
    if (mc_consumer_create(refused_consumer, mc_producer_endpoint(p), "group", group="tp") /= MC_ERR_INVALID_ARGUMENT) &
        call fail("a group without a size was accepted", 0)
    if (index(mc_last_error(), "group_size") == 0) call fail("unclear group without size: " // mc_last_error(), 0)
    call mc_consumer_destroy(outsider)
    call mc_consumer_destroy(second)
    call mc_consumer_destroy(first)
    call mc_producer_destroy(p)
    if (mc_consumer_get_group(first, state) /= MC_ERR_INVALID_ARGUMENT) call fail("group of a destroyed consumer", 0)
    write(output_unit, '(a)') "group: ok"
    flush(output_unit)
  end subroutine

  ! A consumer of the model "sharded" at `endpoint` with `wants` is refused at creation, and the
  ! error holds `expected`.
  subroutine want_is_refused(endpoint, wants, expected)
    character(len=*), intent(in) :: endpoint, expected
    type(mc_want), intent(in) :: wants(:)
    type(mc_consumer) :: refused
    if (mc_consumer_create(refused, endpoint, "sharded", wants=wants) /= MC_ERR_INVALID_ARGUMENT) &
        call fail("wants were accepted that should fail with: " // expected, 0)
    if (index(mc_last_error(), expected) == 0) &
        call fail("unclear refusal of wants: " // mc_last_error() // " (expected: " // expected // ")", 0)
  end subroutine

  ! A model in half precision, as a PyTorch trainer may publish it: bf16 and f16 tensors (here
  ! their bit patterns, registered through modelcast_c, since Fortran has no such types). A
  ! Fortran consumer cannot copy them into any array and is told of as_f32; one created with
  ! as_f32=.true. holds them as f32, every value exact.
  subroutine half_precision_as_f32()
    use modelcast_c, only: mc_producer_register_tensor_c
    ! bf16 1.5, -2.25, 2^-7, 96 and f16 1, -2, 0.5, 65504 (the largest f16), as signed 16-bit words.
    integer(c_int16_t), target :: h_bits(4) = [integer(c_int16_t) :: 16320, -16368, 15360, 17088]
    integer(c_int16_t), target :: g_bits(4) = [integer(c_int16_t) :: 15360, -16384, 14336, 31743]
    character(kind=c_char), target :: h_name(2) = [character(kind=c_char) :: "h", c_null_char]
    character(kind=c_char), target :: g_name(2) = [character(kind=c_char) :: "g", c_null_char]
    integer(c_int64_t), parameter :: four(1) = [4_c_int64_t]
    real(c_float) :: values(4)
    type(mc_producer) :: p
    type(mc_consumer) :: plain, widened
    type(mc_view) :: view
    character(len=8) :: name
    integer(c_int64_t), allocatable :: extents(:)
    integer(c_int) :: dtype
    call check(mc_producer_create(p, "half"), "mc_producer_create (half)")
    call check(mc_producer_register_tensor_c(p%handle, c_loc(h_name), MC_DTYPE_BF16, 1_c_size_t, four, c_loc(h_bits)), &
        "register h (bf16)")
    call check(mc_producer_register_tensor_c(p%handle, c_loc(g_name), MC_DTYPE_F16, 1_c_size_t, four, c_loc(g_bits)), &
        "register g (f16)")
    call check(mc_consumer_create(plain, mc_producer_endpoint(p), "half"), "mc_consumer_create (half)")
    call check(mc_consumer_create(widened, mc_producer_endpoint(p), "half", as_f32=.true.), "mc_consumer_create (as_f32)")
    call check(mc_producer_publish(p, 1), "publish (half)")
    call check(mc_consumer_wait_for_version(plain, 1_c_int64_t, 30000_c_int64_t, view), "wait (half)")
    if (mc_view_copy(view, "h", values) /= MC_ERR_LAYOUT_MISMATCH) call fail("bf16 was copied into real(c_float)", 0)
    if (index(mc_last_error(), "holds bf16 elements; the Fortran array's are f32") == 0) &
        call fail("unclear bf16 copy: " // mc_last_error(), 0)
    if (index(mc_last_error(), "a consumer created with as_f32=.true. holds f16 and bf16 tensors as f32") == 0) &
        call fail("a bf16 copy does not point at as_f32: " // mc_last_error(), 0)
    call mc_view_release(view)
    call check(mc_consumer_wait_for_version(widened, 1_c_int64_t, 30000_c_int64_t, view), "wait (as_f32)")
    call check(mc_view_tensor(view, 1, name, extents, dtype), "mc_view_tensor (as_f32)")
    if (dtype /= MC_DTYPE_F32) call fail("a widened tensor's dtype is", int(dtype))
    call check(mc_view_copy(view, "h", values), "copy h as f32")
    if (any(values /= [1.5, -2.25, 0.0078125, 96.0])) call fail("bf16 widened to other values", 0)
    call check(mc_view_copy(view, "g", values), "copy g as f32")
    if (any(values /= [1.0, -2.0, 0.5, 65504.0])) call fail("f16 widened to other values", 0)
    call mc_view_release(view)
    call mc_consumer_destroy(widened)
    call mc_consumer_destroy(plain)
    call mc_producer_destroy(p)
    write(output_unit, '(a)') "as_f32: ok"
    flush(output_unit)
  end subroutine

  ! Arrays and arguments the module must refuse by name rather than pass on: a strided section
  ! (the compiler would hand over a temporary that the call frees), a name holding a NUL (C
  ! would read a shorter one), a negative consumer count or relay fanout.
  subroutine misuse_is_refused()
    type(mc_producer) :: p
    type(mc_consumer) :: c
    type(mc_view) :: view
    real(c_float), target :: big(8, 6)
    real(c_float), pointer :: huge(:)
    real(c_float), allocatable, target :: forgotten(:, :)
    real(c_float), pointer :: unset(:) => null()
    character(len=40) :: key
    big = 1
    call check(mc_producer_create(p, "misuse"), "mc_producer_create (misuse)")
    ! An unallocated array (or a null pointer) was refused for whatever reason its descriptor's
    ! leftovers gave (assumed-size, not contiguous), a deallocated one by the C library, which
    ! could not name the cause. (Deallocated here: a never-allocated one's extents are undefined.)
    allocate(forgotten(3, 4))
    deallocate(forgotten)
    if (mc_producer_register(p, "forgotten", forgotten) /= MC_ERR_INVALID_ARGUMENT) &
        call fail("an unallocated array was registered", 0)
    if (index(mc_last_error(), "'forgotten' is not allocated") == 0) &
        call fail("unclear unallocated array error: " // mc_last_error(), 0)
    if (mc_producer_register(p, "unset", unset) /= MC_ERR_INVALID_ARGUMENT) &
        call fail("a null pointer was registered", 0)
    if (index(mc_last_error(), "'unset' is not allocated (or a pointer not associated)") == 0) &
        call fail("unclear null pointer error: " // mc_last_error(), 0)
    ! The path has no default: "leave it out" was wrong advice.
    if (mc_load_public_key("  ", key) /= MC_ERR_INVALID_ARGUMENT) call fail("a blank key path was taken", 0)
    if (mc_last_error() /= "mc_load_public_key: path is blank") call fail("unclear blank path error: " // mc_last_error(), 0)
    if (mc_producer_register(p, "sec", big(1:8:2, 1:6:2)) /= MC_ERR_INVALID_ARGUMENT) &
        call fail("a strided section was registered", 0)
    if (index(mc_last_error(), "'sec' is not contiguous") == 0) call fail("unclear section error: " // mc_last_error(), 0)
    call check(mc_producer_register(p, "cols", big(:, 2:3)), "register a contiguous section")
    if (mc_producer_publish(p, 1, metadata_keys=["a", "b"], metadata_values=["1"]) /= MC_ERR_INVALID_ARGUMENT) &
        call fail("metadata of 2 keys and 1 value was published", 0)
    if (index(mc_last_error(), "2 metadata_keys but 1 metadata_values; nothing was published") == 0) &
        call fail("unclear metadata size error: " // mc_last_error(), 0)
    if (mc_producer_publish(p, 1, metadata_keys=["a"]) /= MC_ERR_INVALID_ARGUMENT) &
        call fail("metadata keys without values were published", 0)
    if (mc_producer_register(p, "a" // c_null_char // "b", big) /= MC_ERR_INVALID_ARGUMENT) &
        call fail("a name holding a NUL was registered", 0)
    if (index(mc_last_error(), "NUL") == 0) call fail("unclear NUL error: " // mc_last_error(), 0)
    if (mc_producer_wait_for_consumers(p, -1, 10_c_int64_t) /= MC_ERR_INVALID_ARGUMENT) &
        call fail("wait_for_consumers took a negative count", 0)
    ! An extent past 2^31 was read as a default integer: refused as negative, or (past 2^32)
    ! registered as its low 32 bits, a shorter tensor published without a word. Registering reads
    ! no element, so a pointer over a small array stands for the huge one.
    call c_f_pointer(c_loc(big), huge, [2_c_int64_t**31 + 10_c_int64_t])
    call check(mc_producer_register(p, "huge", huge), "register an extent past 2^31")
    ! create on a variable holding a live producer lost it (its threads ran on, its port stayed bound).
    if (mc_producer_create(p, "misuse") /= MC_ERR_STATE) call fail("create over a live producer", 0)
    if (index(mc_last_error(), "holds a live producer") == 0) call fail("unclear create error: " // mc_last_error(), 0)
    call register_assumed_size(p, big, 8)
    call mc_producer_destroy(p)
    ! A blank key_file was no key: a plaintext producer; a NUL cut the endpoint short.
    if (mc_producer_create(p, "misuse", key_file="   ") /= MC_ERR_INVALID_ARGUMENT) &
        call fail("a blank key_file was taken as none", 0)
    if (index(mc_last_error(), "key_file is blank") == 0) call fail("unclear key_file error: " // mc_last_error(), 0)
    if (mc_producer_create(p, "misuse", control_endpoint="tcp://127.0.0.1:0" // c_null_char // "x") &
        /= MC_ERR_INVALID_ARGUMENT) call fail("an endpoint holding a NUL was taken", 0)
    if (mc_consumer_create(c, "tcp://127.0.0.1:1", "m" // c_null_char // "junk") /= MC_ERR_INVALID_ARGUMENT) &
        call fail("a consumer's model name holding a NUL was taken", 0)
    ! The C ABI's version is unsigned: -1 became a version that never comes, waited for in silence.
    call check(mc_consumer_create(c, "tcp://127.0.0.1:1", "m"), "mc_consumer_create (misuse)")
    if (mc_consumer_wait_for_version(c, -1_c_int64_t, 10_c_int64_t, view) /= MC_ERR_INVALID_ARGUMENT) &
        call fail("a negative version was waited for", 0)
    if (mc_view_copy(view, "w", big) /= MC_ERR_STATE) call fail("a copy from an empty view", 0)
    if (index(mc_last_error(), "holds no version") == 0) call fail("unclear empty view error: " // mc_last_error(), 0)
    call mc_consumer_destroy(c)
    if (mc_consumer_create(c, "tcp://127.0.0.1:1", "m", producer_public_key="") /= MC_ERR_INVALID_ARGUMENT) &
        call fail("a blank producer_public_key pinned nothing without a word", 0)
    if (index(mc_last_error(), "producer_public_key is blank") == 0) &
        call fail("unclear producer_public_key error: " // mc_last_error(), 0)
    if (mc_producer_create(p, "misuse", relay_fanout=-5) /= MC_ERR_INVALID_ARGUMENT) &
        call fail("a negative relay_fanout was taken", 0)
    if (index(mc_last_error(), "relay_fanout") == 0) call fail("unclear relay_fanout error: " // mc_last_error(), 0)
  end subroutine

  ! A legacy assumed-size dummy, as old simulation codes pass their fields: its size is unknown
  ! (shape() gives -1), which was reported as "a negative extent in shape [-1,8]".
  subroutine register_assumed_size(p, field, n)
    type(mc_producer), intent(in) :: p
    integer, intent(in) :: n
    real(c_float), target, intent(inout) :: field(n, *)
    if (mc_producer_register(p, "legacy", field) /= MC_ERR_INVALID_ARGUMENT) &
        call fail("an assumed-size array was registered", 0)
    if (index(mc_last_error(), "'legacy' is assumed-size") == 0) &
        call fail("unclear assumed-size error: " // mc_last_error(), 0)
  end subroutine

  ! Waiting into the same view variable, version after version, without releasing it: the
  ! module releases the view the variable held (with intent(out) it was lost, and after
  ! `buffers` versions every receive buffer was held and no version arrived again).
  subroutine a_view_variable_is_reused()
    type(mc_producer) :: p, idle
    type(mc_consumer) :: c, early
    type(mc_view) :: view
    real(c_float), target :: y(5), y_back(5)
    real(c_float), allocatable, target :: dropped(:)
    integer(c_int64_t) :: version
    integer :: round
    call check(mc_producer_create(p, "reuse"), "mc_producer_create (reuse)")
    call check(mc_producer_register(p, "y", y), "register y (reuse)")
    call check(mc_consumer_create(c, mc_producer_endpoint(p), "reuse"), "mc_consumer_create (reuse)")
    call check(mc_producer_wait_for_consumers(p, 1, 30000_c_int64_t), "the reuse consumer joins")
    do round = 1, 8
      y = real(round, c_float)
      call check(mc_producer_publish(p, int(round, c_int64_t), version), "publish (reuse)")
      call check(mc_consumer_wait_for_version(c, version, 30000_c_int64_t, view), "wait_for_version into a held view")
      call check(mc_view_copy(view, "y", y_back), "copy y (reuse)")
      if (any(y_back /= y)) call fail("the reused view holds another version's values, round", round)
    end do
    ! A deallocated array keeps its extents: its shape matched and the copy wrote through a null
    ! address (SIGSEGV).
    allocate(dropped(5))
    deallocate(dropped)
    if (mc_view_copy(view, "y", dropped) /= MC_ERR_INVALID_ARGUMENT) call fail("a copy into a deallocated array", 0)
    if (index(mc_last_error(), "'y' is not allocated") == 0) call fail("unclear deallocated copy error: " // mc_last_error(), 0)
    ! An acquire that finds no version yet (another consumer's, before its first) keeps the view
    ! held: it was released and the variable emptied, the last good version lost.
    call check(mc_producer_create(idle, "idle"), "mc_producer_create (idle)")
    call check(mc_consumer_create(early, mc_producer_endpoint(idle), "idle"), "mc_consumer_create (idle)")
    call check(mc_consumer_acquire(early, view), "acquire before the first version")
    if (mc_view_version(view) /= 8) call fail("an acquire of no version dropped the held view, now version", &
                                              int(mc_view_version(view)))
    call check(mc_view_copy(view, "y", y_back), "copy y from the kept view")
    if (any(y_back /= 8)) call fail("the kept view holds other values", 0)
    call mc_consumer_destroy(early)
    call mc_producer_destroy(idle)
    call mc_view_release(view)
    call mc_consumer_destroy(c)
    call mc_producer_destroy(p)
    write(output_unit, '(a)') "view reuse: ok"
    flush(output_unit)
  end subroutine

  ! What a consumer that does not know the model reads from a view: each tensor's name, the shape
  ! of the Fortran array to allocate for it and its dtype; then mc_view_copy fills that array.
  subroutine tensors_are_listed(listed)
    type(mc_view), intent(in) :: listed
    type(mc_view) :: empty
    character(len=8) :: name
    character(len=0) :: nothing
    integer(c_int64_t), allocatable :: extents(:)
    integer(c_int) :: dtype
    real(c_float), allocatable :: w_found(:, :)
    if (mc_view_tensor_count(listed) /= 4) call fail("tensors listed:", mc_view_tensor_count(listed))
    call check(mc_view_tensor(listed, 1, name, extents, dtype), "mc_view_tensor 1")
    if (name /= "w" .or. dtype /= MC_DTYPE_F32) call fail("tensor 1 is listed as " // trim(name) // ", dtype", int(dtype))
    if (size(extents) /= 2) call fail("tensor w is listed with rank", size(extents))
    if (any(extents /= [n, m])) call fail("tensor w is listed with another Fortran shape, first extent", int(extents(1)))
    allocate(w_found(extents(1), extents(2)))
    call check(mc_view_copy(listed, name, w_found), "copy w into the array its listing shaped")
    if (any(w_found /= w)) call fail("the listed w holds other values", 0)
    call check(mc_view_tensor(listed, 3, name, extents, dtype), "mc_view_tensor 3")
    if (name /= "k" .or. dtype /= MC_DTYPE_I32 .or. size(extents) /= 3) call fail("tensor 3 is listed as " // trim(name), 3)
    if (any(extents /= [2, 3, 4])) call fail("tensor k is listed with another Fortran shape, first extent", int(extents(1)))
    call check(mc_view_tensor(listed, 4, name, extents), "mc_view_tensor 4, no dtype asked")
    if (name /= "s" .or. size(extents) /= 1) call fail("tensor 4 is listed as " // trim(name), 4)
    if (mc_view_tensor(listed, 5, name, extents) /= MC_ERR_INVALID_ARGUMENT) call fail("tensor 5 of 4 was listed", 0)
    if (index(mc_last_error(), "index 5 is outside 1 to 4") == 0) call fail("unclear index error: " // mc_last_error(), 0)
    if (mc_view_tensor(listed, 0, name, extents) /= MC_ERR_INVALID_ARGUMENT) call fail("tensor 0 was listed", 0)
    if (mc_view_tensor(listed, 2, nothing, extents) /= MC_ERR_INVALID_ARGUMENT) call fail("a name fit 0 characters", 0)
    if (index(mc_last_error(), "tensor 2's name 'b' is longer than the variable (character(len=0))") == 0) &
        call fail("unclear short name error: " // mc_last_error(), 0)
    if (mc_view_tensor_count(empty) /= 0) call fail("a view of no version lists tensors:", mc_view_tensor_count(empty))
    if (mc_view_tensor(empty, 1, name, extents) /= MC_ERR_STATE) call fail("a view of no version listed a tensor", 0)
  end subroutine

  ! A consumer's own account, read through mc_consumer_get_stats and mc_consumer_get_arriving,
  ! and its producer's (mc_producer_get_stats): versions installed, delivered and the bytes they
  ! took; a join the producer refused, named in last_error; and handles that are gone refused. (Counters start at -1 where a binding that wrote
  ! nothing would leave them so.)
  subroutine consumer_stats_say_what_happened()
    type(mc_producer) :: p
    type(mc_consumer) :: c, stranger
    type(mc_view) :: view
    type(mc_consumer_stats) :: stats
    type(mc_producer_stats) :: pstats
    real(c_double), target :: z(6)
    integer(c_int64_t) :: version, arriving, landed, clock, rate, deadline
    integer :: round
    call check(mc_producer_create(p, "counted"), "mc_producer_create (counted)")
    call check(mc_producer_register(p, "z", z), "register z (counted)")
    call check(mc_consumer_create(c, mc_producer_endpoint(p), "counted"), "mc_consumer_create (counted)")
    call check(mc_producer_wait_for_consumers(p, 1, 30000_c_int64_t), "the counted consumer joins")
    do round = 1, 2
      z = real(round, c_double)
      call check(mc_producer_publish(p, int(round, c_int64_t), version), "publish (counted)")
      call check(mc_consumer_wait_for_version(c, version, 30000_c_int64_t, view), "wait_for_version (counted)")
    end do
    call mc_view_release(view)
    stats%current_version = -1
    stats%versions_installed = -1
    stats%bytes_received = -1
    stats%last_error = "not written"
    call check(mc_consumer_get_stats(c, stats), "mc_consumer_get_stats")
    if (stats%current_version /= 2) call fail("stats: current_version", int(stats%current_version))
    if (stats%versions_installed /= 2) call fail("stats: versions_installed", int(stats%versions_installed))
    if (stats%versions_rejected /= 0 .or. stats%transfers_aborted /= 0 .or. stats%bad_messages /= 0) &
        call fail("stats: a clean exchange counted a rejection, an abort or a bad message", 0)
    ! Each version changed all of z, so each came whole (with its snapshot slot's padding).
    if (stats%bytes_received < 2 * c_sizeof(z)) call fail("stats: bytes_received", int(stats%bytes_received))
    if (stats%last_error /= "") call fail("stats: last_error after a clean exchange: " // trim(stats%last_error), 0)
    ! The producer's side of the same exchange: its acks come after the installs, so they are
    ! polled for (30 s at most).
    call system_clock(clock, rate)
    deadline = clock + 30 * rate
    do
      pstats%deliveries = -1
      pstats%transport = "not written"
      call check(mc_producer_get_stats(p, pstats), "mc_producer_get_stats")
      if (pstats%deliveries >= 2) exit
      call system_clock(clock)
      if (clock > deadline) call fail("producer stats: deliveries after 30 s", int(pstats%deliveries))
    end do
    if (pstats%deliveries /= 2 .or. pstats%failed_deliveries /= 0) call fail("producer stats: deliveries", &
                                                                            int(pstats%deliveries))
    if (pstats%versions_published /= 2 .or. pstats%latest_version /= 2) &
        call fail("producer stats: versions published", int(pstats%versions_published))
    if (pstats%consumers /= 1) call fail("producer stats: consumers", int(pstats%consumers))
    if (pstats%bytes_sent < 2 * c_sizeof(z)) call fail("producer stats: bytes_sent", int(pstats%bytes_sent))
    if (pstats%last_stall_ns <= 0) call fail("producer stats: last_stall_ns", int(pstats%last_stall_ns))
    if (pstats%transport /= "ucx") call fail("producer stats: transport " // trim(pstats%transport), 0)
    arriving = -1
    landed = -1
    call check(mc_consumer_get_arriving(c, arriving, landed), "mc_consumer_get_arriving")
    if (arriving /= 0 .or. landed /= 0) call fail("a version is arriving after the last was installed:", int(arriving))
    ! A model the producer does not serve: the producer refuses the join and says why. The
    ! consumer's stats are polled until they say so (30 s at most).
    call check(mc_consumer_create(stranger, mc_producer_endpoint(p), "not-served"), "mc_consumer_create (stranger)")
    call system_clock(clock, rate)
    deadline = clock + 30 * rate
    do
      call check(mc_consumer_get_stats(stranger, stats), "mc_consumer_get_stats (stranger)")
      if (stats%last_error /= "") exit
      call system_clock(clock)
      if (clock > deadline) call fail("a refused join left last_error blank for 30 s", 0)
    end do
    if (index(stats%last_error, "refused to join") == 0) call fail("unclear refused join: " // trim(stats%last_error), 0)
    if (stats%current_version /= 0) call fail("a refused consumer holds version", int(stats%current_version))
    call mc_consumer_destroy(stranger)
    call mc_consumer_destroy(c)
    call mc_producer_destroy(p)
    if (mc_consumer_get_stats(c, stats) /= MC_ERR_INVALID_ARGUMENT) call fail("stats of a destroyed consumer", 0)
    if (mc_producer_get_stats(p, pstats) /= MC_ERR_INVALID_ARGUMENT) call fail("stats of a destroyed producer", 0)
    if (mc_consumer_get_arriving(c, arriving, landed) /= MC_ERR_INVALID_ARGUMENT) &
        call fail("arriving of a destroyed consumer", 0)
    if (arriving /= 0 .or. landed /= 0) call fail("a failed mc_consumer_get_arriving left version", int(arriving))
    write(output_unit, '(a)') "consumer stats: ok"
    flush(output_unit)
  end subroutine

  ! The README's keyed producer: a key file, consumers admitted by their public keys, and a
  ! consumer pinning the producer's key; dir holds trainer.key and server.key with their .pub.
  subroutine keyed_exchange(dir)
    character(len=*), intent(in) :: dir
    type(mc_producer) :: p
    type(mc_consumer) :: c
    type(mc_view) :: kview
    character(len=40) :: trainer_public, server_public, written_public
    character(len=64) :: roomy
    character(len=20) :: cramped
    real(c_float), target :: x(7), x_back(7)
    integer(c_int64_t) :: kversion
    integer :: i
    call check(mc_load_public_key(dir // "/trainer.key.pub", trainer_public), "load trainer.key.pub")
    call check(mc_load_public_key(dir // "/server.key.pub", server_public), "load server.key.pub")
    ! A longer variable gets the key and blanks (it kept its old text past the 40th character);
    ! a shorter one is refused.
    roomy = repeat("#", len(roomy))
    call check(mc_load_public_key(dir // "/server.key.pub", roomy), "load server.key.pub into 64 characters")
    if (roomy /= server_public) call fail("a key loaded into 64 characters reads " // roomy, 0)
    if (mc_load_public_key(dir // "/server.key.pub", cramped) /= MC_ERR_INVALID_ARGUMENT) &
        call fail("a key was loaded into 20 characters", 0)
    if (index(mc_last_error(), "public_key holds 20 characters; a key needs 40") == 0) &
        call fail("unclear short key variable error: " // mc_last_error(), 0)
    ! A key pair the Fortran code writes itself serves as the consumer's below: its .pub holds
    ! the key returned, an existing file is kept unless overwrite, and overwrite makes a new key.
    call check(mc_write_key_pair(dir // "/fortran.key", written_public), "mc_write_key_pair")
    call check(mc_load_public_key(dir // "/fortran.key.pub", server_public), "load fortran.key.pub")
    if (server_public /= written_public) call fail("fortran.key.pub holds another key than returned: " // server_public, 0)
    if (mc_write_key_pair(dir // "/fortran.key") /= MC_ERR_INVALID_ARGUMENT) call fail("a key pair was replaced", 0)
    if (index(mc_last_error(), "fortran.key") == 0) call fail("unclear existing key file: " // mc_last_error(), 0)
    call check(mc_write_key_pair(dir // "/fortran.key", written_public, overwrite=.true.), "mc_write_key_pair (again)")
    if (written_public == server_public) call fail("overwriting a key pair kept its key", 0)
    call check(mc_load_public_key(dir // "/fortran.key.pub", server_public), "load fortran.key.pub (again)")
    if (server_public /= written_public) call fail("the overwritten .pub holds another key: " // server_public, 0)
    if (mc_write_key_pair(dir // "/short.key", cramped) /= MC_ERR_INVALID_ARGUMENT) &
        call fail("a key was written into 20 characters", 0)
    if (mc_producer_create(p, "keyed", key_file=dir // "/trainer.key") == MC_OK) &
        call fail("a keyed producer admitting no consumer was created", 0)
    if (index(mc_last_error(), "allowed_consumer_keys") == 0) call fail("unclear keyed error: " // mc_last_error(), 0)
    call check(mc_producer_create(p, "keyed", key_file=dir // "/trainer.key", allowed_consumer_keys=[server_public]), &
               "mc_producer_create (keyed)")
    x = [(real(i, c_float) / 4, i = 1, 7)]
    call check(mc_producer_register(p, "x", x), "register x (keyed)")
    call check(mc_consumer_create(c, mc_producer_endpoint(p), "keyed", producer_public_key=trainer_public, &
                                  key_file=dir // "/fortran.key"), "mc_consumer_create (keyed)")
    call check(mc_producer_wait_for_consumers(p, 1, 30000_c_int64_t), "the keyed consumer joins")
    call check(mc_producer_publish(p, 1_c_int64_t, kversion), "publish (keyed)")
    call check(mc_consumer_wait_for_version(c, kversion, 30000_c_int64_t, kview), "wait_for_version (keyed)")
    call check(mc_view_copy(kview, "x", x_back), "copy x (keyed)")
    if (any(x_back /= x)) call fail("the keyed consumer read other values", 0)
    call mc_view_release(kview)
    call mc_consumer_destroy(c)
    call mc_producer_destroy(p)
    write(output_unit, '(a)') "keyed: ok"
    flush(output_unit)
  end subroutine

  subroutine run_scheduler(work_mode, label)
    integer(c_int), intent(in) :: work_mode
    character(*), intent(in) :: label
    type(mc_scheduler) :: scheduler
    integer(c_int64_t) :: step, published(64)
    integer :: count
    logical :: publish
    real(c_double) :: stalls
    if (mc_scheduler_create(scheduler, 0_c_int64_t) /= MC_ERR_INVALID_ARGUMENT) call fail("total_steps 0 accepted", 0)
    if (index(mc_last_error(), "total_steps") == 0) call fail("unclear error: " // mc_last_error(), 0)
    if (mc_scheduler_create(scheduler, 3000_c_int64_t, work_mode=7_c_int) /= MC_ERR_INVALID_ARGUMENT) &
        call fail("work_mode 7 accepted", 0)
    if (index(mc_last_error(), "work_mode") == 0) call fail("unclear error: " // mc_last_error(), 0)
    ! The floor reaches the library: a loss below it is refused.
    call check(mc_scheduler_create(scheduler, 3000_c_int64_t, loss_floor=3.0_c_double), "mc_scheduler_create (floor)")
    if (mc_scheduler_observe(scheduler, 100_c_int64_t, 2.5_c_double, 1.0_c_double) /= MC_ERR_INVALID_ARGUMENT) &
        call fail("a loss below loss_floor was accepted", 100)
    if (index(mc_last_error(), "loss_floor") == 0) call fail("unclear error: " // mc_last_error(), 0)
    call mc_scheduler_destroy(scheduler)
    call check(mc_scheduler_create(scheduler, 3000_c_int64_t, warmup_step=500_c_int64_t, &
                                   publish_cost_s=2.0_c_double, update_latency_s=1.0_c_double, work_mode=work_mode), &
               "mc_scheduler_create")
    count = 0
    stalls = 0
    do step = 100, 3000, 100
      call check(mc_scheduler_observe(scheduler, step, 2.0_c_double + 8.0_c_double / (1.0_c_double + step / 300.0_c_double), &
                                      0.5_c_double * step + stalls), "mc_scheduler_observe")
      call check(mc_scheduler_should_publish(scheduler, step, publish), "mc_scheduler_should_publish")
      if (publish) then
        if (step <= 500) call fail("publish before the warm-up step at", int(step))
        count = count + 1
        published(count) = step
        stalls = stalls + 2.0_c_double
      end if
      call check(mc_scheduler_wait_for_background(scheduler), "mc_scheduler_wait_for_background")
    end do
    if (mc_scheduler_observe(scheduler, 3000_c_int64_t, 2.0_c_double, 9999.0_c_double) /= MC_ERR_INVALID_ARGUMENT) &
        call fail("a repeated step was accepted", 3000)
    call mc_scheduler_destroy(scheduler)
    write(output_unit, '(a,*(1x,i0))') label, published(1:count)
    flush(output_unit)
  end subroutine

  ! Values the C++ side recomputes from the indices: exact in every type.
  subroutine fill(v)
    integer, intent(in) :: v
    integer :: i, j, l
    do j = 1, m
      do i = 1, n
        w(i, j) = real(1000 * v + 10 * i + j, c_float)
      end do
    end do
    do i = 1, 5
      b(i) = real(v, c_double) + real(i, c_double) / 8.0_c_double
    end do
    do l = 1, 4
      do j = 1, 3
        do i = 1, 2
          k(i, j, l) = int(10000 * v + 100 * i + 10 * j + l, c_int32_t)
        end do
      end do
    end do
    s(1) = 5000000000_c_int64_t + v
  end subroutine

  subroutine check(status, what)
    integer, intent(in) :: status
    character(len=*), intent(in) :: what
    if (status /= MC_OK) then
      write(output_unit, '(a,a,a,a,a,a)') "FAILED ", what, ": ", mc_status_name(status), ": ", mc_last_error()
      flush(output_unit)
      error stop 1
    end if
  end subroutine

  subroutine fail(what, value)
    character(len=*), intent(in) :: what
    integer, intent(in) :: value
    write(output_unit, '(a,a,a,i0)') "FAILED ", what, " ", value
    flush(output_unit)
    error stop 1
  end subroutine
  ! The C ABI's _init functions write the whole C struct: a mirror shorter than it would be
  ! overrun. The test compares these with the C sizes.
  subroutine print_struct_sizes()
    use modelcast_c, only: mc_producer_options_t, mc_consumer_options_t, mc_tensor_info_t, &
                           mc_scheduler_options_t, mc_publish_result_t, mc_consumer_stats_t, mc_producer_stats_t, &
                           mc_tensor_want_t, mc_tensor_conversion_t, mc_group_state_t
    type(mc_producer_options_t) :: producer_options
    type(mc_consumer_options_t) :: consumer_options
    type(mc_tensor_info_t) :: tensor_info
    type(mc_scheduler_options_t) :: scheduler_options
    type(mc_publish_result_t) :: publish_result
    type(mc_consumer_stats_t) :: consumer_stats
    type(mc_producer_stats_t) :: producer_stats
    type(mc_tensor_want_t) :: tensor_want
    type(mc_tensor_conversion_t) :: tensor_conversion
    type(mc_group_state_t) :: group_state
    write(output_unit, '(a,10(1x,i0))') "sizes", c_sizeof(producer_options), c_sizeof(consumer_options), &
        c_sizeof(tensor_info), c_sizeof(scheduler_options), c_sizeof(publish_result), c_sizeof(consumer_stats), &
        c_sizeof(producer_stats), c_sizeof(tensor_want), c_sizeof(tensor_conversion), c_sizeof(group_state)
    flush(output_unit)
  end subroutine
end program fortran_producer
