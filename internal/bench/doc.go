// Package bench measures ferry against its peers (aws-cli and s5cmd) on one
// machine: a local versitygw on loopback, two generated checkpoint sets (a
// few big files, many small ones in rank folders), and each tool run as a
// child process in alternation, with wall time, client CPU and peak RSS
// taken from the child's rusage and the server's CPU from /proc, and for
// restores the "ready" time: from a cold page cache until every restored
// byte has been read once. It also checks that ferry push's peak RSS does
// not grow with file size, compares ferry's BLAKE3 with b3sum, and measures
// the agent when the ferry binary has one.
//
// cmd/ferry-bench is its command: ParseFlags, then Run. Run it through
// `make bench` (or `make bench BENCH_QUICK=1`), which builds every tool
// first; cmd/ferry-bench/README.md says what is measured and how.
package bench
