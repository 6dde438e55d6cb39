// The drop-in librdmacm's connection manager (rdmacm.h).
#include "compat/rdmacm/rdmacm.h"
