# recd.toml(5) from etc/recd.toml: the shipped file is the reference, so the man page is
# made from it (`make install`) rather than kept beside it by hand.
#
#   awk -v date=YYYY-MM-DD -v version=X.Y -f doc/recd.toml.5.awk etc/recd.toml >recd.toml.5
#
# The file's layout: a title line ("# Recording defaults ####"), comment paragraphs ("#" alone
# between them; lines indented by three spaces are examples, kept as they are), then each key
# commented out with its default ("#key = value") after the paragraphs that describe it, and
# "[section]" lines. Each key becomes a tagged paragraph named by its dotted name
# (recording.format), the one recd's errors use.

function escape(text) {
    gsub(/\\/, "\\e", text)
    if (text ~ /^[.']/) text = "\\&" text
    return text
}

# Paragraphs collected since the last key or title: text, or "\001" + a literal line.
function add(line) { buffer[count++] = line }
function breakParagraph() { if (count > 0 && buffer[count - 1] != "\002") buffer[count++] = "\002" }

# Writes what was collected: as the body of a key (indented) or as plain paragraphs.
function flush(indented,    i, literal, started) {
    literal = 0
    started = 0
    for (i = 0; i < count; i++) {
        if (buffer[i] == "\002") {
            if (literal) { print ".fi"; literal = 0 }
            if (i + 1 < count) print (indented ? ".IP" : ".PP")
            continue
        }
        if (substr(buffer[i], 1, 1) == "\001") {
            if (!literal) { print ".nf"; literal = 1 }
            print escape(substr(buffer[i], 2))
        } else {
            if (literal) { print ".fi"; literal = 0 }
            if (!started && !indented) { print ".PP" }
            print escape(buffer[i])
        }
        started = 1
    }
    if (literal) print ".fi"
    count = 0
}

BEGIN {
    section = ""
    count = 0
    print ".\\\" Made from etc/recd.toml by doc/recd.toml.5.awk; edit those, not this page."
    print ".TH RECD.TOML 5 \"" date "\" \"recd " version "\" \"File Formats Manual\""
    print ".SH NAME"
    print "recd.toml \\- configuration file of recd, the recorder daemon"
    print ".SH SYNOPSIS"
    print ".B /etc/recd/recd.toml"
    print "(recd \\-\\-system)"
    print ".br"
    print ".B $XDG_CONFIG_HOME/recd/recd.toml"
    print "(recd \\-\\-user)"
    print ".SH DESCRIPTION"
}

# A title: "# Recording defaults #####".
/^# [^#].* #+$/ {
    flush(0)
    title = $0
    sub(/^# /, "", title)
    sub(/ #+$/, "", title)
    print ".SH \"" toupper(title) "\""
    next
}
# A rule of #s, or a paragraph break.
/^#+$/ {
    if ($0 == "#") breakParagraph()
    next
}
# A key with its default: "#key = value".
/^#[a-z_]+ = / {
    key = $0
    sub(/^#/, "", key)
    name = key
    sub(/ = .*/, "", name)
    value = key
    sub(/^[a-z_]+ = /, "", value)
    print ".TP"
    print "\\fB" (section == "" ? name : section "." name) "\\fR = " escape(value)
    # The paragraphs before the key describe it; a break that ends them is not a new one.
    while (count > 0 && buffer[count - 1] == "\002") count--
    flush(1)
    next
}
/^\[[a-z_]+\]$/ {
    while (count > 0 && buffer[count - 1] == "\002") count--
    flush(0)
    section = substr($0, 2, length($0) - 2)
    print ".PP"
    print "In the table"
    print ".BR [" section "] ."
    next
}
# An example line, indented under its paragraph.
/^#   / { add("\001" substr($0, 2)); next }
/^# / { add(substr($0, 3)); next }
END {
    flush(0)
    print ".SH FILES"
    print ".TP"
    print ".I /etc/recd/recd.toml"
    print "the system instance's configuration"
    print ".TP"
    print ".I $XDG_CONFIG_HOME/recd/recd.toml"
    print "a user instance's (usually ~/.config/recd/recd.toml)"
    print ".SH SEE ALSO"
    print ".BR recd (1),"
    print ".BR recctl (1),"
    print ".BR systemd.service (5)"
}
