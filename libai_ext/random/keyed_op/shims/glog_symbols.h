// glog is linked into liboneflow with hidden symbols: the CHECK paths that the wheel's inline headers compile
// into an op library need glog's message classes defined in it: the ones their CHECKs and LOGs call, printing
// to stderr (a failed CHECK then aborts).
// Include once per library, after oneflow/core/framework/framework.h.
#pragma once
#include <cstdio>
#include <cstdlib>
#include <sstream>

namespace google {
struct LogMessage::LogMessageData {
  std::ostringstream stream;
};
namespace base {
CheckOpMessageBuilder::CheckOpMessageBuilder(const char* exprtext) : stream_(new std::ostringstream) {
  *stream_ << exprtext << " (";
}
CheckOpMessageBuilder::~CheckOpMessageBuilder() { delete stream_; }
std::ostream* CheckOpMessageBuilder::ForVar2() {
  *stream_ << " vs. ";
  return stream_;
}
std::string* CheckOpMessageBuilder::NewString() {
  *stream_ << ")";
  return new std::string(stream_->str());
}
}  // namespace base
LogMessage::LogMessage(const char* file, int line) : allocated_(new LogMessageData), data_(allocated_) {
  data_->stream << file << ":" << line << "] ";
}
LogMessage::LogMessage(const char* file, int line, LogSeverity) : LogMessage(file, line) {}
LogMessage::~LogMessage() {
  std::fprintf(stderr, "%s\n", data_->stream.str().c_str());
  delete allocated_;
}
std::ostream& LogMessage::stream() { return data_->stream; }
LogMessageFatal::LogMessageFatal(const char* file, int line) : LogMessage(file, line) {}
LogMessageFatal::LogMessageFatal(const char* file, int line, const CheckOpString& result)
    : LogMessage(file, line) {
  stream() << "Check failed: " << *result.str_ << " ";
}
LogMessageFatal::~LogMessageFatal() {
  std::fprintf(stderr, "%s\n", static_cast<std::ostringstream&>(stream()).str().c_str());
  std::abort();
}
}  // namespace google
