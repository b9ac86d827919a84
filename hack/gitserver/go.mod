module github.com/kagenti/platform/hack/gitserver

go 1.26.0
