! modelcast in Fortran: a simulation's field decomposed over ranks, served to two consumers.
! Each rank of the simulation holds a block of columns of the field u(nx, ny) and publishes it
! as its piece; one consumer (an analysis code) copies the whole field, another (a server rank)
! keeps only the block it needs, which spans two ranks' pieces. One process plays every part
! here; in an MPI code each rank runs its own producer, and the endpoints are gathered with
! MPI_Allgather instead of the loop below. Exits 1 if any value differs from the simulation's.
!
! Run with UCX_NET_DEVICES=lo so that UCX stays on loopback.
program fortran_ranks
  use, intrinsic :: iso_c_binding
  use, intrinsic :: iso_fortran_env, only: error_unit, output_unit
  use modelcast
  implicit none
  integer, parameter :: nx = 64, ny = 48, nranks = 3, cols = ny / nranks, steps = 4
  ! Rank r's block is u(:, :, r + 1): columns r * cols + 1 .. (r + 1) * cols of the field.
  ! modelcast reads it at each publish, so it stays where it is (target, never reallocated).
  real(c_double), target :: u(nx, cols, nranks)
  real(c_double), allocatable :: field(:, :), mine(:, :)
  type(mc_producer) :: ranks(nranks)
  type(mc_consumer) :: analysis, server
  type(mc_view) :: view
  character(len=256) :: endpoints(nranks)
  integer :: r, step, i, j

  ! Ranks 1.. first (any free port), then rank 0 with every rank's endpoint (its own not read).
  endpoints = ""
  do r = nranks - 1, 1, -1
    call check(mc_producer_create(ranks(r + 1), "heat", rank=r, rank_count=nranks), "mc_producer_create")
    endpoints(r + 1) = mc_producer_endpoint(ranks(r + 1))
  end do
  call check(mc_producer_create(ranks(1), "heat", rank=0, rank_count=nranks, rank_endpoints=endpoints), &
             "mc_producer_create (rank 0)")
  do r = 0, nranks - 1
    call check(mc_producer_register_piece(ranks(r + 1), "u", u(:, :, r + 1), global_shape=[nx, ny], &
                                          global_start=[1, r * cols + 1]), "mc_producer_register_piece")
  end do

  ! Consumers are told rank 0's endpoint; the server keeps rows 1..32 of columns 10..30.
  call check(mc_consumer_create(analysis, mc_producer_endpoint(ranks(1)), "heat"), "mc_consumer_create")
  call check(mc_consumer_create(server, mc_producer_endpoint(ranks(1)), "heat", &
                                wants=[mc_want_block("u", start=[1, 10], shape=[32, 21])]), "mc_consumer_create")
  allocate(field(nx, ny), mine(32, 21))

  do step = 1, steps
    ! The "simulation": each rank updates its own columns, then publishes its piece of the step.
    do r = 0, nranks - 1
      do j = 1, cols
        do i = 1, nx
          u(i, j, r + 1) = step + 0.01d0 * i + 0.0001d0 * (r * cols + j)
        end do
      end do
      call check(mc_producer_publish(ranks(r + 1), 10 * step), "mc_producer_publish")
    end do
    ! A version holds every rank's piece of one step.
    call check(mc_consumer_wait_for_version(analysis, int(step, c_int64_t), 30000_c_int64_t, view), "wait (analysis)")
    call check(mc_view_copy(view, "u", field), "mc_view_copy (analysis)")
    if (any(field /= reshape(u, [nx, ny]))) call fail("the analysis copy differs at step", 10 * step)
    call check(mc_consumer_wait_for_version(server, int(step, c_int64_t), 30000_c_int64_t, view), "wait (server)")
    call check(mc_view_copy(view, "u", mine), "mc_view_copy (server)")
    if (any(mine /= field(1:32, 10:30))) call fail("the server's block differs at step", 10 * step)
    write(output_unit, '(a,i0,a,i0,a,i0,a)') "step ", 10 * step, ": the whole field from ", nranks, &
        " ranks, and a block of 32 x 21 spanning ranks 0 and 1 (", size(mine), " values), as simulated"
  end do

  call mc_view_release(view)
  call mc_consumer_destroy(server)
  call mc_consumer_destroy(analysis)
  do r = 1, nranks
    call mc_producer_destroy(ranks(r))
  end do

contains

  subroutine check(status, what)
    integer, intent(in) :: status
    character(len=*), intent(in) :: what
    if (status == MC_OK) return
    write(error_unit, '(a,a,a,a,a)') what, " failed: ", mc_status_name(status), ": ", mc_last_error()
    error stop 1
  end subroutine

  subroutine fail(what, value)
    character(len=*), intent(in) :: what
    integer, intent(in) :: value
    write(error_unit, '(a,1x,i0)') what, value
    error stop 1
  end subroutine
end program fortran_ranks
