// The drop-in librdmacm's calls built on the connection manager, or without it (rdmacm.h).
#include "compat/rdmacm/rdmacm.h"
