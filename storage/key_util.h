#pragma once
// Key validation shared by the storage backends (storage/storage.h states the key contract).

#include <string>

#include "core/status.h"

namespace dtrain::storage::detail {

// OK when `key` is a non-empty '/'-separated relative name with no leading '/', no empty, "." or ".."
// segment, and no NUL or control byte. `url` only names the store in the error message.
Status ValidateKey(const std::string& url, const std::string& key);

// A prefix for List: like a key, but may be empty and may end with '/'.
Status ValidatePrefix(const std::string& url, const std::string& prefix);

}  // namespace dtrain::storage::detail
