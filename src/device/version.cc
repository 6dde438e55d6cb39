#include "uroce/version.h"

namespace uroce {

const char* version() { return UROCE_VERSION; }

}  // namespace uroce
