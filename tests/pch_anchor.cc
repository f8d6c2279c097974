// The target that builds tests/testing/test_pch.h once for every test (tests/CMakeLists.txt); never run.
int main() { return 0; }
