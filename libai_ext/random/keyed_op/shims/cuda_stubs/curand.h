// Declarations only: the wheel's CUDA headers name cuRAND's types; the ops never call cuRAND.
#pragma once
typedef enum curandStatus { CURAND_STATUS_SUCCESS = 0 } curandStatus_t;
typedef struct curandGenerator_st* curandGenerator_t;
