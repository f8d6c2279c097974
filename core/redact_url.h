#pragma once
// RedactUrl: a URL fit for messages, logs and files a run writes (config.yaml, the config stored in checkpoints and
// exported weights): user information ("s3://key:secret@bucket", "http://user:pw@host:7480") and a query string
// ("?X-Amz-Signature=...") are replaced by "<redacted>". A string without "://" (a local path) is returned as is.
// storage::RedactUrl (storage/scheme.h) is this function; the config renderer (runtime/config) applies it to every
// string value. Thread-safe; pure.

#include <string>

namespace dtrain {

std::string RedactUrl(const std::string& url);

}  // namespace dtrain
