// The version of liburoce a program runs with (the project's version, "MAJOR.MINOR.PATCH").
#pragma once

namespace uroce {

const char* version();

}  // namespace uroce
