// UCX's own log messages (its warnings and errors, at UCX_LOG_LEVEL) go where modelcast's go:
// the "modelcast.ucx" logger, so stderr or the handler a C, Fortran or Python caller installed.
// UCX alone prints them to stdout, where they would mix with a program's output (a JSON answer,
// a line a script reads). A UCX_LOG_FILE of the user's keeps UCX's messages in that file.
#pragma once

namespace modelcast::transport {

// Installs the route once per process (later calls do nothing); before UCX is first initialised.
// Thread-safe. Messages from UCX threads are serialised by the logger's sink like any other.
void route_ucx_log();

}  // namespace modelcast::transport
