! A Fortran program built against an installed modelcast's Fortran module: it loads the library,
! and a producer of a Fortran array starts, publishes (a default-kind step) and reports its endpoint.
program tiny_fortran
  use, intrinsic :: iso_c_binding
  use modelcast
  implicit none
  real(c_float), target :: w(2, 3)
  type(mc_producer) :: producer
  integer :: step  ! default kind, as in the README: mc_producer_publish takes it
  w = 1.5
  step = 1
  if (mc_producer_create(producer, "tiny") /= MC_OK) error stop "mc_producer_create failed"
  if (mc_producer_register(producer, "w", w) /= MC_OK) error stop "register failed"
  if (mc_producer_publish(producer, step) /= MC_OK) error stop "publish failed"
  print '(a,a,a,a)', "tiny_fortran: ok, library ", mc_version_string(), " at ", mc_producer_endpoint(producer)
  call mc_producer_destroy(producer)
end program tiny_fortran
