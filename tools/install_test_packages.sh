#!/usr/bin/env bash
# Best effort, for `make test`: Debian packages that some tests use and skip without (each test says why).
#   chromium                                 the report's browser check (tests/test_report.py)
#   slurmctld slurmd slurm-client munge      the real-Slurm tests (tests/test_slurm.py start a private cluster)
# Installs only what is missing, only as root with apt-get; never fails the caller. Seconds when all is there.
set -u
[ "$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1 || exit 0
want=()
command -v chromium >/dev/null 2>&1 || want+=(chromium)
command -v slurmctld >/dev/null 2>&1 && command -v munged >/dev/null 2>&1 || want+=(slurmctld slurmd slurm-client munge)
[ ${#want[@]} -eq 0 ] && exit 0
install() { DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$@" >/dev/null 2>&1; }
for pkgs in "chromium" "slurmctld slurmd slurm-client munge"; do
  case " ${want[*]} " in *" ${pkgs%% *} "*) ;; *) continue ;; esac
  # shellcheck disable=SC2086
  install $pkgs || { apt-get update -q >/dev/null 2>&1; install $pkgs; } \
    || echo "install_test_packages: could not install $pkgs; the tests that need it will skip"
done
exit 0
