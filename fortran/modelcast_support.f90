! modelcast_support: what the `modelcast` module's calls share: strings to and from C, and the
! error text of failures the module finds itself (mc_last_error reports those and the C library's).
module modelcast_support
  use, intrinsic :: iso_c_binding
  use modelcast_c
  implicit none
  private
  public :: to_c, to_c_array, as_int64, f_string, mc_last_error, &
       from_c, module_failure, struct_mismatch, shape_text, extents_text, &
      holds_nul, bad_text, count_text, c_text_length

  ! One NUL-terminated text for the C side, as an element of an array of them (metadata).
  type, public :: c_text
    character(kind=c_char), allocatable :: chars(:)
  end type

contains

  ! Results here have their length stated, never deferred (character(len=:), allocatable): for the
  ! length of a deferred-length function result, gfortran 12 gives the calling procedure a static
  ! variable, even with -frecursive, so two threads in one call mixed up each other's lengths
  ! (wrong text, reads past the end). A test checks the library has no such variable (slen.*).

  ! The length of n written as i0.
  pure integer function decimal_length(n)
    integer(c_int64_t), intent(in) :: n
    integer(c_int64_t) :: rest
    decimal_length = 1
    if (n < 0) decimal_length = 2
    rest = n / 10
    do while (rest /= 0)
      decimal_length = decimal_length + 1
      rest = rest / 10
    end do
  end function

  ! The length of the C string at `pointer` (0 for a null pointer).
  pure integer function c_text_length(pointer)
    type(c_ptr), intent(in) :: pointer
    c_text_length = 0
    if (c_associated(pointer)) c_text_length = int(c_strlen(pointer))
  end function

  ! "12", a count or a version, for messages.
  function count_text(n) result(text)
    integer(c_int64_t), intent(in) :: n
    character(len=decimal_length(n)) :: text
    write(text, '(i0)') n
  end function

  ! chars = text without trailing blanks, NUL-terminated, for the C side. (A subroutine: gfortran
  ! 12 warns, wrongly, about the bounds of an allocatable assigned a function's array result.)
  pure subroutine to_c(text, chars)
    character(len=*), intent(in) :: text
    character(kind=c_char), allocatable, intent(out) :: chars(:)
    integer :: i, n
    n = len_trim(text)
    allocate(chars(n + 1))
    do i = 1, n
      chars(i) = text(i:i)
    end do
    chars(n + 1) = c_null_char
  end subroutine

  ! out = `values` as integer(c_int64_t), from either integer kind a program writes extents and
  ! places in: default (literals such as [3, 5]) or c_int64_t (past 2^31 - 1); ok false, and
  ! `out` empty, for any other type. One procedure for both kinds, where a generic would need one
  ! per kind and argument. (A program built with -fdefault-integer-8 has one kind; the module is
  ! built with the default.) A subroutine: a logical function would be left uncalled in an
  ! .and. that the first call already decided.
  subroutine as_int64(values, out, ok)
    class(*), intent(in) :: values(:)
    integer(c_int64_t), allocatable, intent(out) :: out(:)
    logical, intent(out) :: ok
    ok = .true.
    select type (values)
    type is (integer)
      allocate(out, source=int(values, c_int64_t))
    type is (integer(c_int64_t))
      allocate(out, source=values)
    class default
      ok = .false.
      allocate(out(0))
    end select
  end subroutine

  ! holders(i) = texts(i) as to_c makes it, and pointers(i) its address: the array of C strings
  ! a C struct or call takes. pointers has at least one element, so c_loc of it is valid for none.
  ! Both live until the caller's C call returns (the library copies what it keeps).
  subroutine to_c_array(texts, holders, pointers)
    character(len=*), intent(in) :: texts(:)
    type(c_text), allocatable, target, intent(out) :: holders(:)
    type(c_ptr), allocatable, intent(out) :: pointers(:)
    integer :: i
    allocate(holders(size(texts)), pointers(max(1, size(texts))))
    pointers = c_null_ptr
    do i = 1, size(texts)
      call to_c(texts(i), holders(i)%chars)
      pointers(i) = c_loc(holders(i)%chars)
    end do
  end subroutine

  function f_string(pointer) result(text)
    type(c_ptr), intent(in) :: pointer
    character(len=c_text_length(pointer)) :: text
    character(kind=c_char), pointer :: chars(:)
    integer :: i, n
    n = len(text)
    if (n == 0) return
    call c_f_pointer(pointer, chars, [n])
    do i = 1, n
      text(i:i) = chars(i)
    end do
  end function

  ! The text of the last failure on this thread ("" if none), the C library's or this module's.
  function mc_last_error() result(text)
    character(len=c_text_length(mc_last_error_c())) :: text
    text = f_string(mc_last_error_c())
  end function

  ! A status from the C library, as the module's functions return it.
  integer function from_c(status)
    integer(c_int), intent(in) :: status
    from_c = status
  end function

  ! A failure found by this module: recorded as this thread's last error in the C library (one
  ! per thread, as the library's own: a module variable was shared by every thread, and two
  ! failing at once freed it twice), returned as the status.
  integer function module_failure(status, text)
    integer(c_int), intent(in) :: status
    character(len=*), intent(in) :: text
    character(kind=c_char), allocatable :: text_c(:)
    call to_c(text, text_c)
    module_failure = mc_set_last_error_c(status, text_c)
  end function

  ! The check both create functions make: this module's copy of the options struct must be the
  ! library's (an older module against a newer library, or the reverse, would corrupt it).
  integer function struct_mismatch(what, library_size, module_size)
    character(len=*), intent(in) :: what
    integer(c_size_t), intent(in) :: library_size, module_size
    character(len=160) :: text
    write(text, '(a,a,i0,a,i0,a)') what, ": the library's struct has ", library_size, " bytes, this module's ", &
        module_size, ": rebuild the modelcast Fortran module against this library"
    struct_mismatch = module_failure(MC_ERR_UNKNOWN, trim(text))
  end function

  ! "[4,3]", a tensor's shape, for messages.
  function shape_text(extents) result(text)
    integer(c_int64_t), intent(in) :: extents(:)
    character(len=list_length(extents, "[", ",", "]")) :: text
    text = list_text(extents, "[", ",", "]")
  end function

  ! "(4, 3)", a Fortran array's extents, for messages.
  function extents_text(extents) result(text)
    integer(c_int64_t), intent(in) :: extents(:)
    character(len=list_length(extents, "(", ", ", ")")) :: text
    text = list_text(extents, "(", ", ", ")")
  end function

  pure integer function list_length(values, open, separator, close)
    integer(c_int64_t), intent(in) :: values(:)
    character(len=*), intent(in) :: open, separator, close
    integer :: i
    list_length = len(open) + len(close) + max(size(values) - 1, 0) * len(separator)
    do i = 1, size(values)
      list_length = list_length + decimal_length(values(i))
    end do
  end function

  function list_text(values, open, separator, close) result(text)
    integer(c_int64_t), intent(in) :: values(:)
    character(len=*), intent(in) :: open, separator, close
    character(len=list_length(values, open, separator, close)) :: text
    integer :: i, at, n
    text(1:len(open)) = open
    at = len(open) + 1
    do i = 1, size(values)
      n = decimal_length(values(i))
      write(text(at:at + n - 1), '(i0)') values(i)
      at = at + n
      if (i < size(values)) then
        text(at:at + len(separator) - 1) = separator
        at = at + len(separator)
      end if
    end do
    text(at:) = close
  end function

  ! True (status set to MC_ERR_INVALID_ARGUMENT) when `name` holds a NUL, which would end the
  ! C string early: the library would see another, shorter name.
  logical function holds_nul(what, name, status)
    character(len=*), intent(in) :: what, name
    integer, intent(out) :: status
    holds_nul = index(name, c_null_char) > 0
    status = MC_OK
    if (holds_nul) status = module_failure(MC_ERR_INVALID_ARGUMENT, what // ": the name '" // &
        name(1:index(name, c_null_char) - 1) // "' is followed by a NUL character")
  end function

  ! True (status set to MC_ERR_INVALID_ARGUMENT, naming `what`) when a text argument is blank or
  ! holds a NUL. Both would reach the C library as another text: blank as "" (an optional
  ! argument's default: a blank key_file is no key, and the producer plaintext), a NUL as the part
  ! before it. `required`: the argument has no default to fall back on.
  logical function bad_text(what, text, status, required)
    character(len=*), intent(in) :: what, text
    integer, intent(out) :: status
    logical, intent(in), optional :: required
    status = MC_OK
    bad_text = .true.
    if (len_trim(text) == 0) then
      if (present(required)) then
        if (required) then
          status = module_failure(MC_ERR_INVALID_ARGUMENT, what // " is blank")
          return
        end if
      end if
      status = module_failure(MC_ERR_INVALID_ARGUMENT, what // " is blank; leave it out for the default")
    else if (index(text, c_null_char) > 0) then
      status = module_failure(MC_ERR_INVALID_ARGUMENT, what // ": '" // text(1:index(text, c_null_char) - 1) // &
          "' is followed by a NUL character")
    else
      bad_text = .false.
    end if
  end function
end module modelcast_support
