// FaultStorage over the file:// store: DTRAIN_STORAGE_FAULT parsing (and its errors), selection by
// operation, key pattern and occurrence, and the three actions (error, hang, partial write).

#include "storage/fault_storage.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "storage/file_storage.h"

namespace dtrain::storage {
namespace {

using Op = StorageFaultSpec::Op;

double SecondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

class FaultStorageTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char tmpl[] = "/tmp/dtrain_fault_storage_XXXXXX";
    ASSERT_NE(::mkdtemp(tmpl), nullptr);
    dir_ = tmpl;
    unsetenv("DTRAIN_STORAGE_FAULT");
  }
  void TearDown() override {
    unsetenv("DTRAIN_STORAGE_FAULT");
    ASSERT_EQ(std::system(("rm -rf " + dir_).c_str()), 0);
  }

  // A FaultStorage with `spec` over a fresh file:// store in the temp dir.
  std::unique_ptr<FaultStorage> Make(const std::string& spec) {
    StorageFaultSpec s;
    const Status st = StorageFaultSpec::Parse(spec, &s);
    EXPECT_TRUE(st.ok()) << st.ToString();
    std::unique_ptr<Storage> inner;
    EXPECT_TRUE(FileStorage::Open(dir_ + "/root", "file://" + dir_ + "/root", &inner).ok());
    return std::make_unique<FaultStorage>(std::move(inner), s);
  }
  static Status Put(Storage& s, const std::string& key, const std::string& v) { return s.Put(key, v.data(), v.size()); }

  std::string dir_;
};

TEST_F(FaultStorageTest, ParseAcceptsTheDocumentedFormsAndNamesTheVariableOnErrors) {
  StorageFaultSpec s;
  ASSERT_TRUE(StorageFaultSpec::Parse("op=put,key=*/manifest.pb,nth=2,action=partial,bytes=10", &s).ok());
  EXPECT_EQ(s.op, Op::kPut);
  EXPECT_EQ(s.key, "*/manifest.pb");
  EXPECT_EQ(s.nth, 2);
  EXPECT_EQ(s.action, StorageFaultSpec::Action::kPartial);
  EXPECT_EQ(s.bytes, 10u);
  ASSERT_TRUE(StorageFaultSpec::Parse("action=hang,seconds=0.5", &s).ok());
  EXPECT_EQ(s.op, Op::kAny);
  EXPECT_EQ(s.nth, 0);
  EXPECT_DOUBLE_EQ(s.hang_s, 0.5);
  ASSERT_TRUE(StorageFaultSpec::Parse("op=delete,nth=every,action=error", &s).ok());
  EXPECT_EQ(s.op, Op::kDelete);

  const std::pair<const char*, const char*> bad[] = {
      {"op=put", "no action"},
      {"op=write,action=error", "unknown op 'write'"},
      {"action=explode", "unknown action 'explode'"},
      {"action=error,nth=0", "nth must be a call number >= 1 or 'every', got '0'"},
      {"action=error,nth=-1", "nth must be a call number >= 1 or 'every', got '-1'"},
      {"action=hang,seconds=abc", "seconds must be a number > 0, got 'abc'"},
      {"action=error,seconds=3", "seconds= is for action=hang"},
      {"op=put,action=partial", "action=partial needs bytes="},
      {"op=list,action=partial,bytes=3", "action=partial needs op=put or op=get"},
      {"action=error,colour=red", "unknown key 'colour'"},
      {"action=error,put", "'put' is not key=value"},
  };
  for (const auto& [value, why] : bad) {
    const Status st = StorageFaultSpec::Parse(value, &s);
    EXPECT_EQ(st.code(), Status::Code::kInvalidArgument) << value;
    EXPECT_NE(st.message().find(std::string("DTRAIN_STORAGE_FAULT='") + value + "': " + why), std::string::npos)
        << st.message();
    EXPECT_NE(st.message().find("expected op="), std::string::npos) << st.message();
  }
}

TEST_F(FaultStorageTest, KeyPatternIsASubstringOrAGlobAcrossSlashes) {
  StorageFaultSpec s;
  ASSERT_TRUE(StorageFaultSpec::Parse("op=put,key=manifest,action=error", &s).ok());
  EXPECT_TRUE(s.Matches(Op::kPut, "step-00000020/manifest.pb"));
  EXPECT_FALSE(s.Matches(Op::kGet, "step-00000020/manifest.pb"));
  EXPECT_FALSE(s.Matches(Op::kPut, "step-00000020/params.bin"));
  ASSERT_TRUE(StorageFaultSpec::Parse("key=step-*20/*.bin,action=error", &s).ok());
  EXPECT_TRUE(s.Matches(Op::kPut, "step-00000020/params.bin"));
  EXPECT_TRUE(s.Matches(Op::kDelete, "step-00000020/exp_avg.bin"));
  EXPECT_FALSE(s.Matches(Op::kPut, "step-00000010/params.bin"));
  EXPECT_FALSE(s.Matches(Op::kPut, "step-00000020/manifest.pb"));
  ASSERT_TRUE(StorageFaultSpec::Parse("key=latest,action=error", &s).ok());
  EXPECT_TRUE(s.Matches(Op::kHead, "latest"));
}

TEST_F(FaultStorageTest, ErrorHitsOnlyTheNthMatchingCallAndNamesOperationAndKey) {
  auto s = Make("op=put,key=*.bin,nth=2,action=error");
  EXPECT_TRUE(Put(*s, "a/manifest.pb", "m").ok());  // not matching: not counted
  EXPECT_TRUE(Put(*s, "a/one.bin", "1").ok());      // match 1
  const Status st = Put(*s, "a/two.bin", "2");      // match 2: fails
  EXPECT_EQ(st.code(), Status::Code::kIoError);
  EXPECT_NE(st.message().find("put file://" + dir_ +
                              "/root/a/two.bin: injected storage fault "
                              "(DTRAIN_STORAGE_FAULT=op=put,key=*.bin,nth=2,action=error)"),
            std::string::npos)
      << st.message();
  EXPECT_TRUE(Put(*s, "a/three.bin", "3").ok());  // match 3
  std::string v;
  EXPECT_EQ(s->Get("a/two.bin", &v).code(), Status::Code::kNotFound);  // nothing was written
  ASSERT_TRUE(s->Get("a/three.bin", &v).ok());
  EXPECT_EQ(v, "3");
}

TEST_F(FaultStorageTest, EveryCallOfEachOperationCanFail) {
  auto s = Make("action=error");  // op any, every key, every call
  std::string v;
  storage::ObjectInfo info;
  std::vector<ObjectInfo> list;
  EXPECT_NE(Put(*s, "k", "v").message().find("put "), std::string::npos);
  EXPECT_NE(s->Get("k", &v).message().find("get "), std::string::npos);
  EXPECT_NE(s->GetRange("k", 0, 1, &v).message().find("get "), std::string::npos);
  EXPECT_NE(s->Head("k", &info).message().find("head "), std::string::npos);
  const Status l = s->List("step-", &list);
  EXPECT_NE(l.message().find("list file://" + dir_ + "/root/step-*: injected"), std::string::npos) << l.message();
  EXPECT_NE(s->Delete("k").message().find("delete "), std::string::npos);
  // The wrapped store is untouched and still works.
  EXPECT_TRUE(Put(s->inner(), "k", "v").ok());
  EXPECT_TRUE(s->inner().Get("k", &v).ok());
}

TEST_F(FaultStorageTest, PartialPutStoresAPrefixAndReportsSuccess) {
  auto s = Make("op=put,key=params,action=partial,bytes=5");
  const std::string data = "0123456789abcdef";
  ASSERT_TRUE(Put(*s, "step-1/params.bin", data).ok());  // the lie
  ASSERT_TRUE(Put(*s, "step-1/other.bin", data).ok());
  std::string v;
  ASSERT_TRUE(s->Get("step-1/params.bin", &v).ok());
  EXPECT_EQ(v, "01234");
  ASSERT_TRUE(s->Get("step-1/other.bin", &v).ok());
  EXPECT_EQ(v, data);
  ObjectInfo info;
  ASSERT_TRUE(s->Head("step-1/params.bin", &info).ok());
  EXPECT_EQ(info.size, 5u);
  // bytes beyond the object's size keep all of it.
  auto big = Make("op=put,action=partial,bytes=100");
  ASSERT_TRUE(Put(*big, "x", data).ok());
  ASSERT_TRUE(big->Get("x", &v).ok());
  EXPECT_EQ(v, data);
}

TEST_F(FaultStorageTest, PartialGetReturnsAPrefix) {
  auto s = Make("op=get,key=x,nth=1,action=partial,bytes=3");
  ASSERT_TRUE(Put(*s, "x", "abcdefgh").ok());
  std::string v;
  ASSERT_TRUE(s->GetRange("x", 2, 4, &v).ok());  // match 1: "cdef" cut to 3
  EXPECT_EQ(v, "cde");
  ASSERT_TRUE(s->Get("x", &v).ok());  // match 2: intact
  EXPECT_EQ(v, "abcdefgh");
}

TEST_F(FaultStorageTest, TimedHangDelaysTheCallThenRunsIt) {
  auto s = Make("op=put,action=hang,seconds=0.3");
  const auto t0 = std::chrono::steady_clock::now();
  ASSERT_TRUE(Put(*s, "k", "v").ok());
  const double waited = SecondsSince(t0);
  EXPECT_GE(waited, 0.3);
  EXPECT_LT(waited, 5.0);
  std::string v;
  ASSERT_TRUE(s->Get("k", &v).ok());
  EXPECT_EQ(v, "v");
}

TEST_F(FaultStorageTest, UntimedHangBlocksUntilCancelledThenAborts) {
  auto s = Make("op=get,key=k,action=hang");
  ASSERT_TRUE(Put(*s, "k", "v").ok());
  Status st;
  std::atomic<bool> done{false};
  std::thread t([&] {
    std::string v;
    st = s->Get("k", &v);
    done = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  EXPECT_FALSE(done.load());  // still hanging
  const auto t0 = std::chrono::steady_clock::now();
  s->Cancel();
  t.join();
  EXPECT_LT(SecondsSince(t0), 2.0);
  EXPECT_EQ(st.code(), Status::Code::kAborted);
  EXPECT_NE(st.message().find("get file://" + dir_ + "/root/k: injected hang cancelled"), std::string::npos)
      << st.message();
  std::string v;
  EXPECT_EQ(s->Get("k", &v).code(), Status::Code::kAborted);  // cancelled for good: no new hang
}

TEST_F(FaultStorageTest, OpenWrapsOnlyWhenTheVariableIsSetAndRejectsBadValues) {
  const std::string url = "file://" + dir_ + "/root";
  std::unique_ptr<Storage> s;
  ASSERT_TRUE(Storage::Open(url, StorageOptions{}, &s).ok());
  EXPECT_EQ(dynamic_cast<FaultStorage*>(s.get()), nullptr);
  setenv("DTRAIN_STORAGE_FAULT", "op=delete,action=error", 1);
  ASSERT_TRUE(Storage::Open(url, StorageOptions{}, &s).ok());
  ASSERT_NE(dynamic_cast<FaultStorage*>(s.get()), nullptr);
  EXPECT_EQ(s->url(), url);
  EXPECT_TRUE(Put(*s, "k", "v").ok());
  EXPECT_EQ(s->Delete("k").code(), Status::Code::kIoError);
  setenv("DTRAIN_STORAGE_FAULT", "op=delete", 1);
  const Status st = Storage::Open(url, StorageOptions{}, &s);
  EXPECT_EQ(st.code(), Status::Code::kInvalidArgument);
  EXPECT_NE(st.message().find("DTRAIN_STORAGE_FAULT='op=delete': no action"), std::string::npos) << st.message();
}

}  // namespace
}  // namespace dtrain::storage
