package main

import (
	_ "github.com/kagenti/platform/cli/internal/migrate"
)

func main() {}
