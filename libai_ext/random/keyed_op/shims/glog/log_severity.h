// glog 0.5.0's severities: the wheel's glog/logging.h includes this header but the wheel does not ship it.
#pragma once
typedef int LogSeverity;
const int GLOG_INFO = 0, GLOG_WARNING = 1, GLOG_ERROR = 2, GLOG_FATAL = 3, NUM_SEVERITIES = 4;
const int INFO = GLOG_INFO, WARNING = GLOG_WARNING, ERROR = GLOG_ERROR, FATAL = GLOG_FATAL;
#define DFATAL_LEVEL ERROR
extern const char* const LogSeverityNames[NUM_SEVERITIES];
enum { DEBUG_MODE = 0 };
#define IF_DEBUG_MODE(x)
