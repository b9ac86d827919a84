package duck

import (
	appsv1 "k8s.io/api/apps/v1"
	"k8s.io/apimachinery/pkg/labels"
)

type appsDeployment = appsv1.Deployment

func labelSet(m map[string]string) labels.Set { return labels.Set(m) }
