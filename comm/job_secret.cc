#include "comm/job_secret.h"

#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "comm/tcp_wire.h"
#include "core/check.h"

namespace dtrain::comm {
namespace {

constexpr uint32_t kMagic = 0x44544155u;  // "DTAU"
constexpr uint32_t kVersion = 1;
constexpr size_t kMinSecretChars = 32;
constexpr size_t kMaxSecretBytes = 4096;

const char* const kHowToMake =
    "make one with `openssl rand -hex 32 > secret && chmod 600 secret` and give every node the same file "
    "(--secret-file secret, or DTRAIN_JOB_SECRET_FILE=secret), or the same text in DTRAIN_JOB_SECRET";

std::string StripTrailingBlanks(std::string s) {
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r' || s.back() == ' ' || s.back() == '\t')) s.pop_back();
  return s;
}

}  // namespace

JobSecret::~JobSecret() {
  if (!key_.empty()) OPENSSL_cleanse(&key_[0], key_.size());
}

Status JobSecret::Generate(JobSecret* out) {
  unsigned char raw[32];
  if (RAND_bytes(raw, sizeof(raw)) != 1) return Status::Internal("OpenSSL RAND_bytes failed: no job secret");
  static const char kHex[] = "0123456789abcdef";
  std::string hex(2 * sizeof(raw), '0');
  for (size_t i = 0; i < sizeof(raw); ++i) {
    hex[2 * i] = kHex[raw[i] >> 4];
    hex[2 * i + 1] = kHex[raw[i] & 15];
  }
  OPENSSL_cleanse(raw, sizeof(raw));
  out->key_ = std::move(hex);
  return Status::OK();
}

Status JobSecret::FromText(const std::string& text, const std::string& source, JobSecret* out) {
  std::string key = StripTrailingBlanks(text);
  if (key.size() < kMinSecretChars) {
    const size_t n = key.size();
    OPENSSL_cleanse(&key[0], key.size());
    return Status::InvalidArgument("the job secret in " + source + " has " + std::to_string(n) +
                                   " characters, fewer than " + std::to_string(kMinSecretChars) + ": " + kHowToMake);
  }
  out->key_ = std::move(key);
  return Status::OK();
}

Status JobSecret::FromFile(const std::string& path, JobSecret* out) {
  // Symlinks are followed (a Kubernetes Secret volume's files are links into its ..data directory); the checks
  // below apply to the file opened.
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) {
    return Status::InvalidArgument("job secret file '" + path + "': " + std::strerror(errno) + " (" + kHowToMake + ")");
  }
  struct stat st {};
  std::string text;
  Status result;
  if (::fstat(fd, &st) != 0) {
    result = Status::InvalidArgument("job secret file '" + path + "': " + std::strerror(errno));
  } else if (!S_ISREG(st.st_mode)) {
    result = Status::InvalidArgument("job secret file '" + path + "' is not a regular file");
  } else if ((st.st_mode & 077) != 0) {
    char mode[8];
    std::snprintf(mode, sizeof(mode), "%04o", static_cast<unsigned>(st.st_mode & 07777));
    result = Status::InvalidArgument("job secret file '" + path + "' has mode " + mode +
                                     ": other users may read it; `chmod 600 " + path +
                                     "` (the secret admits "
                                     "processes into the job)");
  } else if (st.st_size > static_cast<off_t>(kMaxSecretBytes)) {
    result =
        Status::InvalidArgument("job secret file '" + path + "' holds " + std::to_string(st.st_size) +
                                " bytes, more than " + std::to_string(kMaxSecretBytes) + ": is it the right file?");
  } else {
    text.resize(static_cast<size_t>(st.st_size));
    size_t got = 0;
    while (got < text.size()) {
      const ssize_t k = ::read(fd, &text[got], text.size() - got);
      if (k < 0 && errno == EINTR) continue;
      if (k <= 0) break;
      got += static_cast<size_t>(k);
    }
    text.resize(got);
    result = FromText(text, "file '" + path + "'", out);
    if (!text.empty()) OPENSSL_cleanse(&text[0], text.size());
  }
  ::close(fd);
  return result;
}

Status JobSecret::Resolve(const std::string& secret_file, bool may_generate, JobSecret* out, std::string* source) {
  std::string from;
  Status st;
  const char* text = std::getenv(kJobSecretEnv);
  const char* file = std::getenv(kJobSecretFileEnv);
  if (!secret_file.empty()) {
    from = "--secret-file " + secret_file;
    st = FromFile(secret_file, out);
  } else if (text != nullptr && *text != '\0') {
    from = kJobSecretEnv;
    st = FromText(text, kJobSecretEnv, out);
  } else if (file != nullptr && *file != '\0') {
    from = std::string(kJobSecretFileEnv) + "=" + file;
    st = FromFile(file, out);
  } else if (may_generate) {
    from = "generated for this job";
    st = Generate(out);
  } else {
    st = Status::InvalidArgument(
        std::string("no job secret: the processes of a job started on several nodes prove to each other that they "
                    "belong to it with a shared secret; ") +
        kHowToMake);
  }
  if (st.ok() && source != nullptr) *source = from;
  return st;
}

Status JobSecret::ExportToEnvironment() const {
  DT_CHECK_ARG(!key_.empty(), "ExportToEnvironment: empty job secret");
  if (::setenv(kJobSecretEnv, key_.c_str(), 1) != 0) {
    return Status::IoError(std::string("cannot set ") + kJobSecretEnv + ": " + std::strerror(errno));
  }
  return Status::OK();
}

// --- handshake -----------------------------------------------------------------------------------

std::array<unsigned char, kMacBytes> JobSecret::Mac(const char* role, const std::string& context,
                                                    const unsigned char* nonce_s, const unsigned char* nonce_c) const {
  // role | 0 | context | 0 | server nonce | client nonce: the zeros keep the fields apart.
  std::string msg(role);
  msg.push_back('\0');
  msg += context;
  msg.push_back('\0');
  msg.append(reinterpret_cast<const char*>(nonce_s), kNonceBytes);
  msg.append(reinterpret_cast<const char*>(nonce_c), kNonceBytes);
  std::array<unsigned char, kMacBytes> mac{};
  unsigned int len = 0;
  if (HMAC(EVP_sha256(), key_.data(), static_cast<int>(key_.size()), reinterpret_cast<const unsigned char*>(msg.data()),
           msg.size(), mac.data(), &len) == nullptr ||
      len != kMacBytes) {
    mac.fill(0);  // never equal to a real proof of a non-empty key by chance; Check compares all 32 bytes
  }
  return mac;
}

Status JobSecret::MakeChallenge(Challenge* out) {
  detail::PutU32(kMagic, out->data());
  detail::PutU32(kVersion, out->data() + 4);
  if (RAND_bytes(out->data() + 8, kNonceBytes) != 1) return Status::Internal("OpenSSL RAND_bytes failed: no nonce");
  return Status::OK();
}

Status JobSecret::MakeAnswer(const std::string& context, const Challenge& challenge, Answer* answer,
                             std::array<unsigned char, kMacBytes>* expected_server_proof) const {
  if (detail::GetU32(challenge.data()) != kMagic) {
    return Status::InvalidArgument("is not a dtrain listener (no dtrain challenge)");
  }
  if (detail::GetU32(challenge.data() + 4) != kVersion) {
    return Status::InvalidArgument("speaks handshake version " + std::to_string(detail::GetU32(challenge.data() + 4)) +
                                   ", this side version " + std::to_string(kVersion) +
                                   " (the same dtrain build must run everywhere)");
  }
  unsigned char* nonce_c = answer->data();
  if (RAND_bytes(nonce_c, kNonceBytes) != 1) return Status::Internal("OpenSSL RAND_bytes failed: no nonce");
  const unsigned char* nonce_s = challenge.data() + 8;
  const auto proof = Mac("client", context, nonce_s, nonce_c);
  std::copy(proof.begin(), proof.end(), answer->begin() + kNonceBytes);
  *expected_server_proof = Mac("server", context, nonce_s, nonce_c);
  return Status::OK();
}

bool JobSecret::Check(const std::string& context, const Challenge& challenge, const Answer& answer,
                      Verdict* verdict) const {
  verdict->fill(0);
  const unsigned char* nonce_s = challenge.data() + 8;
  const unsigned char* nonce_c = answer.data();
  const auto expected = Mac("client", context, nonce_s, nonce_c);
  const bool ok = !key_.empty() && CRYPTO_memcmp(expected.data(), answer.data() + kNonceBytes, kMacBytes) == 0;
  if (!ok) {
    detail::PutU32(1, verdict->data());
    return false;
  }
  const auto proof = Mac("server", context, nonce_s, nonce_c);
  std::copy(proof.begin(), proof.end(), verdict->begin() + 4);
  return true;
}

Status ClientHandshake(const TcpSocket& sock, const JobSecret& secret, const std::string& context, Deadline deadline,
                       const std::string& what) {
  Challenge challenge;
  DT_RETURN_IF_ERROR(sock.RecvAll(challenge.data(), challenge.size(), deadline, what));
  Answer answer;
  std::array<unsigned char, kMacBytes> expected{};
  const Status made = secret.MakeAnswer(context, challenge, &answer, &expected);
  if (!made.ok()) return Status::InvalidArgument(what + " " + made.message());
  DT_RETURN_IF_ERROR(sock.SendAll(answer.data(), answer.size(), deadline, what));
  Verdict verdict;
  DT_RETURN_IF_ERROR(sock.RecvAll(verdict.data(), verdict.size(), deadline, what));
  if (detail::GetU32(verdict.data()) != 0) {
    return Status::InvalidArgument(what +
                                   " refused this process: it holds another job secret (every node and worker "
                                   "of a job needs the same --secret-file / DTRAIN_JOB_SECRET)");
  }
  if (CRYPTO_memcmp(expected.data(), verdict.data() + 4, kMacBytes) != 0) {
    return Status::InvalidArgument(what +
                                   " is not this job's: it cannot prove the job secret (another job on the same "
                                   "port, or a process posing as one)");
  }
  return Status::OK();
}

}  // namespace dtrain::comm
