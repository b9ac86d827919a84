// Module testsh tests hack/test.sh, the script of `make test` that runs the suites side by side:
// how it stops them. Standard library only.
module github.com/kagenti/platform/hack/testsh

go 1.26.0
