# shellcheck shell=bash
# Port checks of scripts/testbed (sourced by it, and by tests/testbed_ports.rs).

wait_port() { # port seconds: wait until something listens on 127.0.0.1:port
    local port=$1 secs=$2 i
    for ((i = 0; i < secs * 10; i++)); do
        if port_busy "$port"; then return 0; fi
        sleep 0.1
    done
    return 1
}

# Something listens on the port. Asked of the kernel's socket table, never by connecting:
# a connect to an orphaned listener whose accept queue is full has no answer, and bash's
# /dev/tcp waits out the SYN retries (a restart hung for 137 s on one). Falls back to a
# connect bounded by timeout(1) where ss is missing.
port_busy() {
    if command -v ss >/dev/null; then
        [ -n "$(ss -ltnH "sport = :$1" 2>/dev/null)" ]
    else
        timeout 2 bash -c "exec 3<>/dev/tcp/127.0.0.1/$1" 2>/dev/null
    fi
}
