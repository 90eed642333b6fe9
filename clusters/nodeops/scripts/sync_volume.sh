#!/usr/bin/env bash
# sync_volume: copy the attached volume into the head's shared folder ("in") or back
# ("out"). Runs on the head only. vm / bare_metal: /shared/volume; container (no shared
# folder): /volume on the head's own disk. Deletions are not propagated either way: a
# sync never removes a file from the customer's volume.
set -euo pipefail

SOURCE="$ROOT${RUNCRATE_VOLUME_SOURCE:?RUNCRATE_VOLUME_SOURCE is not set}"
DIRECTION="${RUNCRATE_SYNC_DIRECTION:?}"
if [ "${RUNCRATE_MACHINE_KIND:?}" = container ]; then
    TARGET="$ROOT/volume"
else
    TARGET="$ROOT/shared/volume"
fi

copy_tree() {
    local from="$1" to="$2"
    mkdir -p "$to"
    # Contents, modes and times, never owners: each cluster's root is a different unprivileged
    # user on the machine that keeps the volume, and a chown to another's would be refused.
    if command -v rsync >/dev/null 2>&1; then
        rsync -rlpt "$from/" "$to/"
    else
        cp -R --preserve=mode,timestamps "$from/." "$to/"
    fi
}

is_head || die "the volume is synced on the head only"
case "$DIRECTION" in
    in)
        step "volume-in"
        [ -d "$SOURCE" ] || die "volume source $SOURCE does not exist"
        copy_tree "$SOURCE" "$TARGET"
        ;;
    out)
        step "volume-out"
        [ -d "$TARGET" ] || die "$TARGET does not exist; nothing to sync back"
        # The volume has a size: a sync back that would not fit is refused whole (nothing of
        # the volume is changed), never written past it.
        LIMIT="${RUNCRATE_VOLUME_BYTES:-0}"
        if [ "$LIMIT" -gt 0 ]; then
            USED="$(du -sb "$TARGET" | cut -f1)"
            if [ "$USED" -gt "$LIMIT" ]; then
                die "$(awk -v used="$USED" -v limit="$LIMIT" 'BEGIN { printf "%s holds %.1f GB, more than the volume'"'"'s %.0f GB; the volume keeps its earlier data", "'"${TARGET#"$ROOT"}"'", used / 1e9, limit / 1e9 }')"
            fi
        fi
        copy_tree "$TARGET" "$SOURCE"
        ;;
    *)
        die "unknown sync direction $DIRECTION"
        ;;
esac
# The last line says what the volume now holds from this cluster (the control plane reads
# "synced BYTES bytes" for the customer's event).
log "volume synced $DIRECTION: $(find "$TARGET" -type f | wc -l | tr -d ' ') files, synced $(du -sb "$TARGET" | cut -f1) bytes"
