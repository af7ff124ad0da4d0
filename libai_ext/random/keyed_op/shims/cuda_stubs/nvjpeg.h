// Declarations only: the wheel's cuda_util.h names nvJPEG's status type; the ops never call nvJPEG.
#pragma once
typedef enum { NVJPEG_STATUS_SUCCESS = 0 } nvjpegStatus_t;
