// The precompiled header of every test file (tests/CMakeLists.txt: dtrain_test_pch): GoogleTest and the
// standard headers most tests include. Third-party and standard headers only, so a change to dtrain's own
// headers never rebuilds it. Test files still include what they use.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>
