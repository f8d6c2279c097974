#pragma once
// JobSecret: the secret every control connection of one job proves it knows, and the challenge-response
// over it (HMAC-SHA256 through OpenSSL) that the per-node launchers' link (launcher/node_link.h) and the TCP
// rendezvous (comm/tcp_rendezvous.h) run before they read a single byte of a hello.
//
// Where the secret comes from (JobSecret::Resolve): `--secret-file FILE` (a regular file of mode 0600 or
// stricter, or a symlink to one, as in a Kubernetes Secret volume), else DTRAIN_JOB_SECRET (the text itself), else DTRAIN_JOB_SECRET_FILE (a file, as for
// --secret-file; for a Kubernetes Secret mounted as a file), else — where one process starts the whole job —
// 32 fresh random bytes (RAND_bytes) as 64 hex digits. A secret is at least 32 characters (trailing blanks
// and newlines are not part of it); `openssl rand -hex 32 > secret && chmod 600 secret` makes one.
// `dtrain launch` hands it to its workers in DTRAIN_JOB_SECRET (ExportToEnvironment): never on a command line,
// never in a log or a message.
//
// The handshake (mutual; `context` names the protocol, so a proof made for one is no proof for the other):
//   1. server -> client: the challenge, "DTAU", version 1, a nonce of 32 fresh random bytes (40 bytes).
//   2. client -> server: the answer, its own nonce (32) and HMAC(secret, "client" | context | both nonces).
//   3. the server compares (CRYPTO_memcmp). Wrong: the server sends the verdict "refused" (4 bytes, 1 then
//      32 zero bytes: nothing about the job) and closes; it logs the peer's address. Right: verdict 0 and
//      HMAC(secret, "server" | context | both nonces).
//   4. the client checks the server's proof: a listener that cannot make it is not this job's.
// Only then does either side speak its protocol. The pure functions below are the steps (the server's
// side is driven by comm/auth_acceptor.h, many connections at once); ClientHandshake runs steps 1-4 on a
// blocking socket.
// Thread-safety: a JobSecret is an immutable value; every function may be called from any thread.

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>

#include "comm/tcp_socket.h"
#include "core/status.h"

namespace dtrain::comm {

constexpr size_t kNonceBytes = 32;
constexpr size_t kMacBytes = 32;
constexpr size_t kChallengeBytes = 8 + kNonceBytes;  // magic, version, nonce
constexpr size_t kAnswerBytes = kNonceBytes + kMacBytes;
constexpr size_t kVerdictBytes = 4 + kMacBytes;  // 0 and the server's proof, or 1 and zeros

using Challenge = std::array<unsigned char, kChallengeBytes>;
using Answer = std::array<unsigned char, kAnswerBytes>;
using Verdict = std::array<unsigned char, kVerdictBytes>;

// The environment variables the secret travels in.
constexpr const char* kJobSecretEnv = "DTRAIN_JOB_SECRET";
constexpr const char* kJobSecretFileEnv = "DTRAIN_JOB_SECRET_FILE";

class JobSecret {
 public:
  JobSecret() = default;
  ~JobSecret();
  JobSecret(const JobSecret&) = default;
  JobSecret& operator=(const JobSecret&) = default;

  // 32 random bytes from OpenSSL's RAND_bytes, as 64 hex digits.
  static Status Generate(JobSecret* out);
  // `text` without trailing blanks; InvalidArgument (naming `source`, never the text) when shorter than 32.
  static Status FromText(const std::string& text, const std::string& source, JobSecret* out);
  // A regular file, not readable or writable by group or others (InvalidArgument naming the mode and the chmod).
  static Status FromFile(const std::string& path, JobSecret* out);
  // The order in the header; `secret_file` empty: not given. Without any of them, generates one when
  // `may_generate`, else InvalidArgument saying how to make and pass one. *source (if not null) says where
  // it came from ("--secret-file /p", "DTRAIN_JOB_SECRET", "generated"), for logs.
  static Status Resolve(const std::string& secret_file, bool may_generate, JobSecret* out, std::string* source);

  // setenv(DTRAIN_JOB_SECRET) in this process, so children inherit it (call before starting threads).
  Status ExportToEnvironment() const;

  bool empty() const { return key_.empty(); }

  // --- the handshake's steps (header) ---
  // Step 1: a fresh challenge.
  static Status MakeChallenge(Challenge* out);
  // Step 2, on the client: the answer to `challenge`, and the proof the server must send back.
  // InvalidArgument when `challenge` is not a dtrain challenge.
  Status MakeAnswer(const std::string& context, const Challenge& challenge, Answer* answer,
                    std::array<unsigned char, kMacBytes>* expected_server_proof) const;
  // Step 3, on the server: true when `answer` proves the secret; *verdict is what to send either way.
  bool Check(const std::string& context, const Challenge& challenge, const Answer& answer, Verdict* verdict) const;

 private:
  std::array<unsigned char, kMacBytes> Mac(const char* role, const std::string& context, const unsigned char* nonce_s,
                                           const unsigned char* nonce_c) const;
  std::string key_;
};

// Steps 1-4 on the client side of `sock` (blocking, bounded by `deadline`). kInvalidArgument when the server
// refused this side's proof ("... holds another job secret") or could not prove its own; kUnavailable when the
// connection failed or closed first (the caller may retry). `what` names the server.
Status ClientHandshake(const TcpSocket& sock, const JobSecret& secret, const std::string& context, Deadline deadline,
                       const std::string& what);

}  // namespace dtrain::comm
