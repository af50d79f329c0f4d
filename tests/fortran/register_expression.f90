! Must not compile: an expression registered as an array (a temporary that the compiler frees
! when the call returns, so every publish would send freed memory). CTest expects gfortran's
! error at this line, not a successful build (label fortran).
program register_expression
  use, intrinsic :: iso_c_binding
  use modelcast
  implicit none
  type(mc_producer) :: p
  real(c_float), target :: w(4)
  integer :: status
  w = 1
  status = mc_producer_register(p, "w", w)
  status = mc_producer_register(p, "twice", w * 2.0_c_float)
end program
