// Fuzzes what node 0's launcher reads from a connection (launcher/node_link.h): the answer to its job-secret
// challenge (comm/job_secret.h), then 256-byte frames (launcher/node_link_frame.h) — the hello, and the frames of
// the running link. Input: [64-byte answer][40-byte challenge, for the client's side][frames...].
// Properties: no answer the fuzzer makes proves the secret, and the verdict sent back says "refused" and nothing
// else; a well-formed challenge is answered with a proof the server accepts, and the server's proof is the one
// the client expects; a decoded frame's text is at most 235 bytes without NUL and survives a round trip; a hello
// is accepted only from a node in range, not yet joined, with node 0's nnodes and attempt.

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include "comm/job_secret.h"
#include "fuzz/fuzz_util.h"
#include "launcher/node_link_frame.h"

namespace {

using dtrain::comm::JobSecret;
namespace launcher = dtrain::launcher;

const JobSecret& Secret() {
  static const JobSecret secret = [] {
    JobSecret s;
    DT_FUZZ_ASSERT(JobSecret::FromText("the-fuzzer's-job-secret-of-more-than-32-chars", "fuzz", &s).ok(), "secret");
    return s;
  }();
  return secret;
}

void CheckHandshake(const uint8_t* data, size_t size) {
  using namespace dtrain::comm;
  if (size >= kAnswerBytes) {
    Challenge challenge;
    DT_FUZZ_ASSERT(JobSecret::MakeChallenge(&challenge).ok(), "MakeChallenge");
    Answer answer;
    std::memcpy(answer.data(), data, kAnswerBytes);
    Verdict verdict;
    DT_FUZZ_ASSERT(!Secret().Check(launcher::kNodeLinkContext, challenge, answer, &verdict),
                   "a fuzzed answer proved the job secret");
    for (size_t i = 0; i < verdict.size(); ++i) {
      DT_FUZZ_ASSERT(verdict[i] == (i == 3 ? 1 : 0), "the refusal says more than 'refused'");
    }
  }
  if (size >= kAnswerBytes + kChallengeBytes) {
    Challenge challenge;
    std::memcpy(challenge.data(), data + kAnswerBytes, kChallengeBytes);
    Answer answer;
    std::array<unsigned char, kMacBytes> expected{};
    if (Secret().MakeAnswer(launcher::kNodeLinkContext, challenge, &answer, &expected).ok()) {
      Verdict verdict;
      DT_FUZZ_ASSERT(Secret().Check(launcher::kNodeLinkContext, challenge, answer, &verdict),
                     "the server refused the client's own proof");
      DT_FUZZ_ASSERT(verdict[3] == 0 && std::equal(expected.begin(), expected.end(), verdict.begin() + 4),
                     "the server's proof is not the one the client expects");
    }
  }
}

void CheckFrame(const launcher::NodeLinkFrame& frame) {
  launcher::NodeLinkMessage m;
  if (!launcher::DecodeNodeLinkFrame(frame, "fuzz", &m).ok()) return;
  DT_FUZZ_ASSERT(m.text.size() <= 235 && m.text.find('\0') == std::string::npos,
                 "text of " + std::to_string(m.text.size()));
  launcher::NodeLinkMessage back;
  const launcher::NodeLinkFrame again = launcher::MakeNodeLinkFrame(m.kind, m.node, m.a, m.b, m.text);
  DT_FUZZ_ASSERT(launcher::DecodeNodeLinkFrame(again, "fuzz", &back).ok() && back.kind == m.kind &&
                     back.node == m.node && back.a == m.a && back.b == m.b && back.text == m.text,
                 "frame round trip");
  const std::vector<bool> joined = {true, false, true, false};  // nodes 0 and 2 are in
  const std::string error = launcher::CheckNodeLinkHello(m, 4, 1, joined, "10.0.0.9:4242");
  if (error.empty()) {
    DT_FUZZ_ASSERT(m.kind == launcher::kHello && m.a == 4 && m.b == 1 && (m.node == 1 || m.node == 3),
                   "accepted a hello from node " + std::to_string(m.node));
  } else {
    DT_FUZZ_ASSERT(error.size() < 200, "reason of " + std::to_string(error.size()) + " bytes");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  CheckHandshake(data, size);
  const size_t head = dtrain::comm::kAnswerBytes + dtrain::comm::kChallengeBytes;
  for (size_t off = std::min(size, head); off + sizeof(launcher::NodeLinkFrame) <= size;
       off += sizeof(launcher::NodeLinkFrame)) {
    launcher::NodeLinkFrame frame;
    std::memcpy(&frame, data + off, sizeof(frame));
    CheckFrame(frame);
  }
  return 0;
}
