// JobSecret: where the secret comes from (file mode, symlinks followed, length, precedence) and the handshake's steps:
// a proof made for one protocol or with another secret is refused, any flipped bit is refused, and the two sides
// agree on the server's proof.
#include "comm/job_secret.h"

#include <gtest/gtest.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <string>

#include "tests/testing/fixtures.h"
#include "tests/testing/subprocess.h"

namespace dtrain::comm {
namespace {

const char* const kText = "0123456789abcdef0123456789abcdef-test";

JobSecret Make(const char* text) {
  JobSecret s;
  EXPECT_TRUE(JobSecret::FromText(text, "test", &s).ok());
  return s;
}

// Runs the handshake between `client` and `server` over the given contexts; true when both sides accept.
bool Handshake(const JobSecret& client, const std::string& client_context, const JobSecret& server,
               const std::string& server_context, int flip_bit = -1) {
  Challenge challenge;
  EXPECT_TRUE(JobSecret::MakeChallenge(&challenge).ok());
  Answer answer;
  std::array<unsigned char, kMacBytes> expected{};
  EXPECT_TRUE(client.MakeAnswer(client_context, challenge, &answer, &expected).ok());
  if (flip_bit >= 0) answer[flip_bit / 8] ^= static_cast<unsigned char>(1u << (flip_bit % 8));
  Verdict verdict;
  if (!server.Check(server_context, challenge, answer, &verdict)) {
    EXPECT_EQ(verdict[3], 1);  // "refused", and nothing else
    for (size_t i = 4; i < verdict.size(); ++i) EXPECT_EQ(verdict[i], 0);
    return false;
  }
  return std::equal(expected.begin(), expected.end(), verdict.begin() + 4);
}

TEST(JobSecretTest, HandshakeAcceptsOnlyTheSameSecretAndProtocol) {
  const JobSecret a = Make(kText), b = Make("another-secret-of-more-than-32-characters");
  EXPECT_TRUE(Handshake(a, "dtrain node-link 2", a, "dtrain node-link 2"));
  EXPECT_FALSE(Handshake(b, "dtrain node-link 2", a, "dtrain node-link 2"));
  EXPECT_FALSE(Handshake(a, "dtrain rendezvous 2", a, "dtrain node-link 2"));  // no replay across protocols
  for (int bit : {0, 100, 255, 256, 300, 511}) EXPECT_FALSE(Handshake(a, "p", a, "p", bit)) << "bit " << bit;
}

TEST(JobSecretTest, EveryChallengeIsFresh) {
  Challenge c1, c2;
  ASSERT_TRUE(JobSecret::MakeChallenge(&c1).ok());
  ASSERT_TRUE(JobSecret::MakeChallenge(&c2).ok());
  EXPECT_NE(c1, c2);
  Challenge bad = c1;
  bad[0] ^= 1;
  Answer answer;
  std::array<unsigned char, kMacBytes> expected{};
  EXPECT_EQ(Make(kText).MakeAnswer("p", bad, &answer, &expected).code(), Status::Code::kInvalidArgument);
}

TEST(JobSecretTest, GeneratedSecretsAre64HexDigitsAndDiffer) {
  JobSecret a, b;
  ASSERT_TRUE(JobSecret::Generate(&a).ok());
  ASSERT_TRUE(JobSecret::Generate(&b).ok());
  EXPECT_FALSE(Handshake(a, "p", b, "p"));
  EXPECT_TRUE(Handshake(a, "p", a, "p"));
  ASSERT_TRUE(a.ExportToEnvironment().ok());
  const std::string text = getenv(kJobSecretEnv);
  EXPECT_EQ(text.size(), 64u);
  EXPECT_EQ(text.find_first_not_of("0123456789abcdef"), std::string::npos);
  ::unsetenv(kJobSecretEnv);
}

TEST(JobSecretTest, FileMustBePrivateRegularAndLongEnough) {
  testing::TempDir dir;
  const std::string path = dir.path() + "/secret";
  testing::WriteFile(path, std::string(kText) + "\n");
  chmod(path.c_str(), 0600);
  JobSecret s;
  ASSERT_TRUE(JobSecret::FromFile(path, &s).ok());
  EXPECT_TRUE(Handshake(s, "p", Make(kText), "p")) << "the trailing newline is not part of the secret";
  chmod(path.c_str(), 0640);
  Status st = JobSecret::FromFile(path, &s);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(st.message().find("has mode 0640"), std::string::npos) << st.message();
  chmod(path.c_str(), 0600);
  // A Kubernetes Secret volume's files are symlinks: followed, and the file they name is checked.
  ASSERT_EQ(symlink(path.c_str(), (dir.path() + "/link").c_str()), 0);
  EXPECT_TRUE(JobSecret::FromFile(dir.path() + "/link", &s).ok());
  chmod(path.c_str(), 0644);
  st = JobSecret::FromFile(dir.path() + "/link", &s);
  EXPECT_NE(st.message().find("has mode 0644"), std::string::npos) << st.message();
  chmod(path.c_str(), 0600);
  st = JobSecret::FromFile(dir.path(), &s);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  testing::WriteFile(path, "short\n");
  st = JobSecret::FromFile(path, &s);
  EXPECT_NE(st.message().find("has 5 characters, fewer than 32"), std::string::npos) << st.message();
  EXPECT_EQ(st.message().find("short"), std::string::npos) << "the secret is never echoed";
}

TEST(JobSecretTest, ResolveOrderIsFlagThenEnvironmentThenFileVariableThenGenerated) {
  testing::TempDir dir;
  const std::string path = dir.path() + "/secret";
  testing::WriteFile(path, "a-secret-from-the-file-of-more-than-32-chars\n");
  chmod(path.c_str(), 0600);
  ::unsetenv(kJobSecretEnv);
  ::unsetenv(kJobSecretFileEnv);
  JobSecret s;
  std::string source;
  EXPECT_EQ(JobSecret::Resolve("", false, &s, &source).code(), Status::Code::kInvalidArgument);
  ASSERT_TRUE(JobSecret::Resolve("", true, &s, &source).ok());
  EXPECT_EQ(source, "generated for this job");
  ::setenv(kJobSecretFileEnv, path.c_str(), 1);
  ASSERT_TRUE(JobSecret::Resolve("", false, &s, &source).ok());
  EXPECT_EQ(source, std::string(kJobSecretFileEnv) + "=" + path);
  ::setenv(kJobSecretEnv, kText, 1);
  ASSERT_TRUE(JobSecret::Resolve("", false, &s, &source).ok());
  EXPECT_EQ(source, kJobSecretEnv);
  EXPECT_TRUE(Handshake(s, "p", Make(kText), "p"));
  ASSERT_TRUE(JobSecret::Resolve(path, false, &s, &source).ok());
  EXPECT_EQ(source, "--secret-file " + path);
  ASSERT_TRUE(s.ExportToEnvironment().ok());
  EXPECT_STREQ(getenv(kJobSecretEnv), "a-secret-from-the-file-of-more-than-32-chars");
  ::unsetenv(kJobSecretEnv);
  ::unsetenv(kJobSecretFileEnv);
}

}  // namespace
}  // namespace dtrain::comm
