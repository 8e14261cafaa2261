#!/bin/sh
# recd from the shell with socat and jq (see doc/protocol.md).
#
#   recd.sh status              the state's name
#   recd.sh start NAME [SECS]   start a recording; prints its path
#   recd.sh stop                stop it; prints the path and the frames written
#   recd.sh watch               "STATE NAME" per state change, until recd stops
#
# The socket, found as recctl finds it: $RECD_SOCKET, else the user instance's if it exists
# ($XDG_RUNTIME_DIR/recd/recd.sock, or /tmp/recd-<uid>/recd/recd.sock without XDG_RUNTIME_DIR),
# else the system instance's, /run/recd/recd.sock.
set -eu
user_socket=${XDG_RUNTIME_DIR:-/tmp/recd-$(id -u)}/recd/recd.sock
if [ -n "${RECD_SOCKET:-}" ]; then socket=$RECD_SOCKET
elif [ -S "$user_socket" ]; then socket=$user_socket
else socket=/run/recd/recd.sock
fi

# socat runs this script again as the other end of the connection: it writes the request to
# recd, then copies recd's lines to fd 3 (our stdout): one line for a call, all of them for
# watch. The connection stays open for writing until the answer is in.
case ${1:-} in
--answer) printf '%s\n' "$REQUEST"; head -n 1 >&3; exit ;;
--follow) printf '%s\n' "$REQUEST"; cat >&3; exit ;;
esac
exchange() {  # MODE REQUEST
    REQUEST=$2 socat UNIX-CONNECT:"$socket" EXEC:"$0 $1" 3>&1
}

# One request, its result: exits 1 with recd's message if it is an error, and if there is no
# answer at all (recd not running: socat says why; a pipeline's status is only jq's).
call() {
    exchange --answer "$1" | jq -nec 'first(inputs) // ("recd: no answer\n" | halt_error(1))
        | if .error then ("recd: \(.error.message)\n" | halt_error(1)) else .result end'
}

case ${1:-} in
status)
    result=$(call '{"jsonrpc":"2.0","id":1,"method":"status"}')
    printf '%s\n' "$result" | jq -r '.state.name' ;;
start)
    params=$(jq -nc --arg name "$2" --arg secs "${3:-}" '{name: $name} + (if $secs == "" then {} else {duration: ($secs | tonumber)} end)')
    result=$(call "{\"jsonrpc\":\"2.0\",\"id\":1,\"method\":\"start\",\"params\":$params}")
    printf '%s\n' "$result" | jq -r '.path' ;;
stop)
    result=$(call '{"jsonrpc":"2.0","id":1,"method":"stop"}')
    printf '%s\n' "$result" | jq -r '"\(.path) \(.frames)"' ;;
watch)
    # The subscription's snapshot, then every `changed` notification of the state.
    exchange --follow '{"jsonrpc":"2.0","id":1,"method":"subscribe","params":{"topics":["state"]}}' \
        | jq -n --unbuffered -r '(first(inputs) // ("recd: no answer\n" | halt_error(1))), inputs
                              | (.result.snapshot[]? // .params? // empty) | select(.topic == "state")
                              | "\(.value.name) \(.value.recording.name // "")"' ;;
*)
    sed -n '2,9p' "$0" >&2; exit 64 ;;
esac
