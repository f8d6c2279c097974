// Fuzzes what the TCP rendezvous reads (comm/tcp_rendezvous.h): rank 0 reads the answer to its job-secret
// challenge (comm/job_secret.h) and then 16-byte hellos; a peer reads 12-byte notice heads.
// Input: [64-byte answer][then, in turns, a 16-byte hello and a 12-byte notice head...].
// Properties: no answer the fuzzer makes proves the secret, and the verdict says "refused" and nothing else; a
// hello is accepted only from a rank in range, not yet in, with rank 0's world size and protocol version; every
// reason is short; a notice head that parses announces at most 64 KiB.

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "comm/job_secret.h"
#include "comm/tcp_rendezvous.h"
#include "comm/tcp_wire.h"
#include "fuzz/fuzz_util.h"

namespace {

using namespace dtrain::comm;

const JobSecret& Secret() {
  static const JobSecret secret = [] {
    JobSecret s;
    DT_FUZZ_ASSERT(JobSecret::FromText("the-fuzzer's-job-secret-of-more-than-32-chars", "fuzz", &s).ok(), "secret");
    return s;
  }();
  return secret;
}

void CheckHello(const unsigned char* h) {
  const std::vector<std::string> addrs = {"", "10.0.0.2:1", "", ""};  // world 4, rank 1 is in
  const std::string reason = detail::CheckRendezvousHello(h, "10.0.0.9:4242", addrs, 4);
  const int rank = static_cast<int32_t>(detail::GetU32(h + 8));
  if (reason.empty()) {
    DT_FUZZ_ASSERT(detail::GetU32(h + 4) == 2 && detail::GetU32(h + 12) == 4 && (rank == 2 || rank == 3),
                   "accepted a hello of rank " + std::to_string(rank));
  } else {
    DT_FUZZ_ASSERT(reason.size() < 300, "reason of " + std::to_string(reason.size()) + " bytes");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size >= kAnswerBytes) {
    Challenge challenge;
    DT_FUZZ_ASSERT(JobSecret::MakeChallenge(&challenge).ok(), "MakeChallenge");
    Answer answer;
    std::memcpy(answer.data(), data, kAnswerBytes);
    Verdict verdict;
    DT_FUZZ_ASSERT(!Secret().Check("dtrain rendezvous 2", challenge, answer, &verdict),
                   "a fuzzed answer proved the job secret");
    for (size_t i = 0; i < verdict.size(); ++i) {
      DT_FUZZ_ASSERT(verdict[i] == (i == 3 ? 1 : 0), "the refusal says more than 'refused'");
    }
  }
  size_t off = std::min(size, kAnswerBytes);
  while (off + detail::kRendezvousHelloBytes <= size) {
    CheckHello(data + off);
    off += detail::kRendezvousHelloBytes;
    if (off + 12 > size) break;
    uint32_t code = 0, n = 0;
    if (detail::ParseRendezvousNoticeHead(data + off, "fuzz", &code, &n).ok()) {
      DT_FUZZ_ASSERT(n <= (1u << 16), "a notice of " + std::to_string(n) + " bytes");
    }
    off += 12;
  }
  return 0;
}
