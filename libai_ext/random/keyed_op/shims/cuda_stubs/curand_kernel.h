// Declarations only (see curand.h).
#pragma once
#include <curand.h>
typedef struct curandStateXORWOW curandState;
