#!/usr/bin/env bash
# The core's file-level import graph, from its `use crate::...` lines: fails on a cycle between
# files, and on an arrow from the persistence module (src/persist.rs, src/persist/) up to a
# limiter's module — persistence sits below the limiters, which implement it beside each type.
set -euo pipefail
cd "$(dirname "$0")/.."
exec perl -e '
use strict; use warnings;
use File::Find;
# What persistence may import: the layers below the limiters.
my %below = map { $_ => 1 } qw(clock error gcra limits persist quota refusal snapshot sync);
my @files;
find(sub { push @files, $File::Find::name if /\.rs$/ }, "src");
my (%edges, $bad);
# A module path (segments) to the file that defines it: the longest prefix with a file.
sub file_of {
    my @seg = @_;
    while (@seg) {
        my $f = "src/" . join("/", @seg) . ".rs";
        return $f if -f $f;
        pop @seg;
    }
    return "src/lib.rs";
}
# `a::{b, c::{d, e}}` -> `a::b`, `a::c::d`, `a::c::e`.
sub expand {
    my ($s) = @_;
    $s =~ s/\s+//g;
    my ($pre, $rest) = $s =~ /^([^{]*)\{(.*)\}$/ or return ($s);
    my ($depth, $cur, @parts) = (0, "");
    for my $ch (split //, $rest) {
        $depth++ if $ch eq "{";
        $depth-- if $ch eq "}";
        if ($ch eq "," && $depth == 0) { push @parts, $cur; $cur = ""; } else { $cur .= $ch; }
    }
    push @parts, $cur if length $cur;
    return map { expand($pre . $_) } @parts;
}
for my $f (sort @files) {
    open my $fh, "<", $f or die "$f: $!";
    my $text = do { local $/; <$fh> };
    $text =~ s{//[^\n]*}{}g;
    while ($text =~ /\buse\s+crate::([^;]*);/g) {
        for my $path (expand($1)) {
            $path =~ s/\s+as\s+\w+$//;
            my @seg = grep { $_ ne "" && $_ ne "self" && $_ ne "*" } split /::/, $path;
            my $to = file_of(@seg);
            next if $to eq $f;
            $edges{$f}{$to} = 1;
            if ($f =~ m{^src/persist(\.rs|/)} && @seg && !$below{$seg[0]} && $to ne "src/lib.rs") {
                print "upward arrow: $f -> $to (use crate::$path)\n";
                $bad = 1;
            }
        }
    }
}
# Cycles: a depth-first search, reporting the first cycle through each file it meets.
my (%state, @stack);
sub visit {
    my ($f) = @_;
    $state{$f} = 1;
    push @stack, $f;
    for my $to (sort keys %{ $edges{$f} || {} }) {
        if (($state{$to} // 0) == 1) {
            my @cycle = (@stack[(grep { $stack[$_] eq $to } 0..$#stack)[0] .. $#stack], $to);
            print "import cycle: ", join(" -> ", @cycle), "\n";
            $bad = 1;
        } elsif (!$state{$to}) {
            visit($to);
        }
    }
    pop @stack;
    $state{$f} = 2;
}
visit($_) for sort keys %edges;
my $n = 0;
$n += keys %{ $edges{$_} } for keys %edges;
if ($bad) { exit 1 }
print "imports: ", scalar(@files), " files, $n arrows, no cycle, nothing above persistence imported by it\n";
'
