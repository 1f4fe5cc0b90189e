# apt_install PKG...: installs Debian packages that are missing, as root or with sudo,
# without letting their services start on the default ports.
apt_install() {
  [ "$#" -eq 0 ] && return 0
  local sudo=""
  if [ "$(id -u)" -ne 0 ]; then
    if command -v sudo >/dev/null 2>&1; then sudo="sudo"; else
      echo "error: leasekeeper needs $*; install them (apt-get install $*) or run as root" >&2
      exit 1
    fi
  fi
  local created_policy=""
  if [ ! -e /usr/sbin/policy-rc.d ]; then
    printf '#!/bin/sh\nexit 101\n' | $sudo tee /usr/sbin/policy-rc.d >/dev/null
    $sudo chmod +x /usr/sbin/policy-rc.d
    created_policy=1
  fi
  echo "installing $* ..." >&2
  $sudo apt-get update -qq -o DPkg::Lock::Timeout=300
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq -o DPkg::Lock::Timeout=300 "$@" >/dev/null
  if [ -n "$created_policy" ]; then
    $sudo rm -f /usr/sbin/policy-rc.d
  fi
}
