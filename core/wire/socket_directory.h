// Who can replace a Unix socket file: whoever can write its directory. They can delete the
// file and bind their own socket at its path, and so answer everyone who connects or reconnects
// (a takeover of a plaintext producer endpoint once installed seven rogue versions). So a socket
// that is not otherwise authenticated must lie in a directory that no other user can write:
// owned by this process's user (or by root) and writable by its owner only. A shared directory
// such as /tmp (world-writable, even with its sticky bit: anyone may create the name first) is
// refused; mkdtemp() and `mkdir -m 700` make directories that pass. Every directory above it
// must be owned by this user or root and writable by no one else, or have its sticky bit (as
// /tmp has): otherwise whoever can write one could move the private directory away and put their
// own in its place. A symbolic link on the way must be owned by this user or root: its owner
// could replace it (in /tmp, for one) and point it at a directory of theirs. Used for plaintext ipc://
// control endpoints (with keys, the handshake proves the producer's identity and any directory
// will do) and for modelcastd's attach socket. Also compiled into the daemon's attach library.
#pragma once

#include <sys/types.h>

#include <string>

namespace modelcast::wire {

// Throws Error(kInvalidArgument): `what`, then which directory and what is wrong with it, then
// `remedy`, unless the directory of the socket file `path` passes the rule above.
void check_socket_directory(const std::string& path, const std::string& what, const std::string& remedy);

// check_socket_directory's rule for `directory` itself, whose files decide what is served
// (modelcastd's repository: whoever could write it could choose the weights served after a
// restart, signed producers or not). `file_kind` ("repository") goes into the message.
void check_private_directory(const std::string& directory, const std::string& what, const std::string& remedy,
                             const std::string& file_kind);

// The user owning the directory of socket file `path` (symbolic links followed), who decides who
// may bind there: a client trusts a listener running as that user. Throws Error(kAuthentication),
// `what` first, naming the directory or link on the way if another user (not this process's,
// root or that owner) controls it, or could have made the directory first (in /tmp, for one), or
// if it cannot be read.
uid_t socket_directory_owner(const std::string& path, const std::string& what);

// check_socket_directory for a plaintext ipc:// `endpoint` (tcp:// is not checked here), with an
// abstract socket name refused too. The producer checks before binding, the consumer before
// connecting. `role` ("producer", "consumer") goes into the message.
void check_private_ipc_directory(const std::string& endpoint, const std::string& role);

// For a file that says whom to trust (a public key file, a key pair): throws
// Error(kInvalidArgument), `what` first, unless no user but this process's and root could have
// written or replaced it: the file, and each symbolic link naming it, owned by this user or
// root; its directory owned by them and writable by no one else, or with the sticky bit (as
// /tmp: then only owners replace names); the route to it as for sockets above. A missing file
// passes (its reader says so). As ssh's StrictModes, which refuses such key files.
void check_trusted_file(const std::string& path, const std::string& what, int links = 0);

}  // namespace modelcast::wire
