package controller

import "github.com/kagenti/platform/pkg/duck"

func duckRef(kind, name string) duck.TargetRef { return duck.TargetRef{Kind: kind, Name: name} }
