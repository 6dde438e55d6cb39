#!/bin/bash
# The ctest fixture cleanup of install.package: purges the uroce packages when MARKER says that
# test installed it and did not get to purge it (killed at its timeout).
#   package_cleanup.sh MARKER
marker=$1
if [ -e "$marker" ]; then
  echo "install.package left the uroce packages installed: purging them"
  dpkg --purge uroce-dev uroce && rm -f "$marker"
fi
exit 0
