#!/bin/bash
# glidein-ext-setup.sh: glideinWMS custom script (factory or frontend XML, executable="True").
#
# Protocol (glideinWMS "Custom Scripts"): called with the glidein_config path and the entry id;
# reads and adds entries with add_config_line / add_condor_vars_line; reports with error_gen -ok or
# -error and an exit code that matches.  What it does:
#   1. finds glidein-ext (GLIDEIN_EXT_DIR: the untarred bundle, see docs/factory.md) and a
#      python3 >= 3.9 to run it (the python3 of EL9 worker nodes);
#   2. `glidein-ext init` in the glidein's start-up directory: glidein.json and the first .pilot.ad
#      with USED_FRACTION1k = 0, before the HTCondor daemons start (Sfiligoi 2013);
#   3. drops the glidein snippet into $(WORK_DIR)/condor_config.d (the glidein's LOCAL_CONFIG_DIR)
#      and exports GLIDEIN_EXT_START_DIR and GLIDEIN_EXT_BIN to the HTCondor config.
#   4. with GLIDEIN_EXT_TQ_URL: starts the Task Queue pilot agent in the background (it ends with
#      this glidein) and turns on the startd's fetch-work hooks, so the glidein's startd pulls the
#      agent's tasks (docs/glidein.md: "Task Queue work through the glidein's startd").
# Settings read from glidein_config (all optional): GLIDEIN_EXT_DIR, GLIDEIN_EXT_PYTHON,
# GLIDEIN_EXT_PRIORITY_FACTOR, GLIDEIN_EXT_CRON_PERIOD, GLIDEIN_EXT_REQUIRED (default True: a
# glidein that cannot run glidein-ext fails validation; False: it runs on without the handshake);
# GLIDEIN_EXT_TQ_URL, GLIDEIN_EXT_TQ_SITE (default GLIDEIN_Site), GLIDEIN_EXT_TQ_TOKEN_FILE (the
# pilot credential, relative to the start dir; else $GLIDEIN_EXT_TQ_PILOT_TOKEN),
# GLIDEIN_EXT_TQ_CA_FILE (the CA, PEM, of an https:// Task Queue, relative to the start dir; else
# the system's CA store).  docs/factory.md names the credentials that bring both files.
set -euo pipefail

glidein_config="${1:?usage: glidein-ext-setup.sh GLIDEIN_CONFIG [ENTRY]}"
script_name=$(basename "$0")

cfg_get() {
    # The value of one glidein_config entry (the last one wins, as in glideinWMS), or empty.
    local line
    line=$(grep "^$1 " "$glidein_config" | tail -n 1) || true
    printf '%s' "${line#"$1 "}"
}

add_config_line_source=$(cfg_get ADD_CONFIG_LINE_SOURCE)
# shellcheck disable=SC1090
source "$add_config_line_source"
error_gen=$(cfg_get ERROR_GEN_PATH)
condor_vars_file=$(cfg_get CONDOR_VARS_FILE)
export condor_vars_file

fail() {
    # One error for the factory; exit non-zero unless glidein-ext is optional for this glidein.
    local kind=$1 message=$2
    if [ "$(cfg_get GLIDEIN_EXT_REQUIRED | tr '[:upper:]' '[:lower:]')" = "false" ]; then
        echo "glidein-ext: $message (GLIDEIN_EXT_REQUIRED=False: continuing without it)" >&2
        "$error_gen" -ok "$script_name" "GlideinExtEnabled" "False"
        exit 0
    fi
    echo "glidein-ext: $message" >&2
    "$error_gen" -error "$script_name" "$kind" "$message" "GlideinExtEnabled" "False"
    exit 1
}

ext_dir=$(cfg_get GLIDEIN_EXT_DIR)
[ -n "$ext_dir" ] || fail "Config" "GLIDEIN_EXT_DIR is not set (untar the glidein-ext bundle with absdir_outattr=GLIDEIN_EXT_DIR)"
[ -d "$ext_dir/glidein_ext" ] || fail "Corruption" "no glidein_ext package in $ext_dir"

python=$(cfg_get GLIDEIN_EXT_PYTHON)
python=${python:-python3}
command -v "$python" >/dev/null 2>&1 || fail "WN_Resource" "no $python on this worker node"
"$python" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 9) else 1)' \
    || fail "WN_Resource" "$python is older than 3.9"

start_dir=$(cfg_get GLIDEIN_START_DIR_ORIG)
start_dir=${start_dir:-$PWD}
work_dir=$(cfg_get GLIDEIN_WORK_DIR)
[ -n "$work_dir" ] || fail "Config" "GLIDEIN_WORK_DIR is not set"
cpus=$(cfg_get GLIDEIN_CPUS)
case "$cpus" in ''|*[!0-9]*) cpus=1 ;; esac
[ "$cpus" -ge 1 ] || cpus=1
priority=$(cfg_get GLIDEIN_EXT_PRIORITY_FACTOR)
case "$priority" in ''|*[!0-9-]*) priority=0 ;; esac

# The launcher HTCondor runs for the startd cron and the job hooks.
launcher="$ext_dir/bin/glidein-ext"
mkdir -p "$ext_dir/bin"
cat >"$launcher" <<LAUNCHER
#!/bin/sh
PYTHONPATH='$ext_dir':'$ext_dir/lib'\${PYTHONPATH:+:\$PYTHONPATH}
export PYTHONPATH
exec '$(command -v "$python")' -m glidein_ext "\$@"
LAUNCHER
chmod 0755 "$launcher"

if ! out=$("$launcher" init --start-dir "$start_dir" --cpus "$cpus" \
        --priority-factor "$priority" --name "$(cfg_get GLIDEIN_Name)" 2>&1); then
    fail "WN_Resource" "glidein-ext init failed: ${out//$'\n'/ }"
fi

mkdir -p "$work_dir/condor_config.d"
cp "$ext_dir/glidein_ext/condor_config.d/50-glidein-ext-glidein.config" "$work_dir/condor_config.d/"

add_config_line GLIDEIN_EXT_START_DIR "$start_dir"
add_config_line GLIDEIN_EXT_BIN "$launcher"
add_condor_vars_line GLIDEIN_EXT_START_DIR "C" "-" "+" "Y" "N" "-"
add_condor_vars_line GLIDEIN_EXT_BIN "C" "-" "+" "Y" "N" "-"
period=$(cfg_get GLIDEIN_EXT_CRON_PERIOD)
if [ -n "$period" ]; then
    case "$period" in *[!0-9]*) fail "Config" "GLIDEIN_EXT_CRON_PERIOD must be a number of seconds" ;; esac
    add_condor_vars_line GLIDEIN_EXT_CRON_PERIOD "I" "-" "+" "N" "N" "-"
fi

tq_url=$(cfg_get GLIDEIN_EXT_TQ_URL)
if [ -n "$tq_url" ]; then
    site=$(cfg_get GLIDEIN_EXT_TQ_SITE)
    site=${site:-$(cfg_get GLIDEIN_Site)}
    [ -n "$site" ] || fail "Config" "GLIDEIN_EXT_TQ_URL needs GLIDEIN_Site (or GLIDEIN_EXT_TQ_SITE)"
    agent_args=(--agent-only --start-dir "$start_dir" --cpus "$cpus" --site "$site" --tq "$tq_url"
        --launcher "$launcher" --watch-pid "$PPID")
    glidein_name=$(cfg_get GLIDEIN_Name)
    [ -z "$glidein_name" ] || agent_args+=(--name "$glidein_name")
    memory=$(cfg_get GLIDEIN_MaxMemMBs)
    case "$memory" in ''|*[!0-9]*) ;; *) agent_args+=(--memory "$memory") ;; esac
    token_file=$(cfg_get GLIDEIN_EXT_TQ_TOKEN_FILE)
    if [ -n "$token_file" ]; then
        case "$token_file" in /*) ;; *) token_file="$start_dir/$token_file" ;; esac
        # The agent reads only a private token file (docs/security.md, "one rule").  A relative
        # name is a file glidein_startup.sh downloaded into the glidein's own work directory with
        # its umask: this script, which knows that, makes it private; an absolute path given by
        # the site is taken as it is (and refused if others may read it).
        case "$(cfg_get GLIDEIN_EXT_TQ_TOKEN_FILE)" in
            /*) ;;
            *) chmod 600 "$token_file" || fail "WN_Resource" "cannot make $token_file private" ;;
        esac
        agent_args+=(--tq-token-file "$token_file")
    fi
    ca_file=$(cfg_get GLIDEIN_EXT_TQ_CA_FILE)
    if [ -n "$ca_file" ]; then
        # A CA is public: taken as it is, relative names from the glidein's start directory.
        case "$ca_file" in /*) ;; *) ca_file="$start_dir/$ca_file" ;; esac
        [ -f "$ca_file" ] || fail "Config" "GLIDEIN_EXT_TQ_CA_FILE: no file $ca_file"
        agent_args+=(--tq-ca-file "$ca_file")
    fi
    state="$start_dir/.glidein-ext"
    mkdir -p "$state"
    # The agent outlives this script: glidein_startup.sh ($PPID) runs HTCondor next; the agent
    # ends when that process does (--watch-pid), or when the glidein has drained.
    nohup "$launcher" wrapper "${agent_args[@]}" >>"$state/agent.log" 2>&1 </dev/null &
    agent_pid=$!
    echo "$agent_pid" >"$state/agent.pid"
    # Ready once its hook launchers and its socket exist: the startd's first fetch finds them.
    for _ in $(seq 1 60); do
        [ -x "$state/hooks/fetch-work" ] && [ -S "$state/agent/agent.sock" ] && break
        if ! kill -0 "$agent_pid" 2>/dev/null; then
            fail "WN_Resource" "the Task Queue agent ended: $(tail -n 3 "$state/agent.log" | tr '\n' ' ')"
        fi
        sleep 0.5
    done
    [ -S "$state/agent/agent.sock" ] || fail "WN_Resource" "the Task Queue agent did not start in 30 s"
    add_config_line GLIDEIN_EXT_HOOKS "$state/hooks"
    add_condor_vars_line GLIDEIN_EXT_HOOKS "C" "-" "+" "N" "N" "-"
    add_config_line GLIDEIN_EXT_TQ_WORK "True"
    add_condor_vars_line GLIDEIN_EXT_TQ_WORK "C" "-" "+" "N" "N" "-"
fi
add_config_line GLIDEIN_EXT_ENABLED "True"
add_condor_vars_line GLIDEIN_EXT_ENABLED "C" "-" "+" "N" "Y" "-"

"$error_gen" -ok "$script_name" "GlideinExtEnabled" "True" "GlideinExtStartDir" "$start_dir"
exit 0
