package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/urfave/cli/v2"
	batchv1 "k8s.io/api/batch/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/ferrylabs/ferry/agent"
	"github.com/ferrylabs/ferry/internal/s3test"
)

const (
	kubernetesDir = "../../deploy/kubernetes"
	dockerfile    = "../../Dockerfile"
	// completionIndex is where an Indexed Job puts a pod's index.
	completionIndex = "metadata.annotations['batch.kubernetes.io/job-completion-index']"
	completionLabel = "metadata.labels['batch.kubernetes.io/job-completion-index']"
	// jobUID is the label holding the UID of the pod's Job.
	jobUID = "metadata.labels['batch.kubernetes.io/controller-uid']"
)

// kubeManifests are the objects of every YAML document in deploy/kubernetes.
type kubeManifests struct {
	jobs       []*batchv1.Job
	configMaps map[string]*corev1.ConfigMap
	services   []*corev1.Service
	policies   []*networkingv1.NetworkPolicy
	kustomize  []*kustomization
}

// decodeStrict decodes one YAML document into obj as the API server would
// refuse it: an unknown field, a duplicate key, a wrong type, or a field
// whose name matches only without regard to case (encoding/json accepts
// that; Kubernetes does not) is an error.
func decodeStrict(doc []byte, obj any) error {
	if err := yaml.UnmarshalStrict(doc, obj); err != nil {
		return err
	}
	js, err := yaml.YAMLToJSONStrict(doc)
	if err != nil {
		return err
	}
	var raw any
	if err := json.Unmarshal(js, &raw); err != nil {
		return err
	}
	back, err := json.Marshal(obj)
	if err != nil {
		return err
	}
	var typed any
	if err := json.Unmarshal(back, &typed); err != nil {
		return err
	}
	return sameKeys("", raw, typed)
}

// sameKeys reports the first key of raw that typed lacks: a key the typed
// decoding matched case-insensitively or dropped.
func sameKeys(path string, raw, typed any) error {
	switch r := raw.(type) {
	case map[string]any:
		tm, ok := typed.(map[string]any)
		if !ok {
			if len(r) == 0 {
				return nil
			}
			return fmt.Errorf("%s: not an object once decoded", path)
		}
		for k, v := range r {
			tv, ok := tm[k]
			if !ok {
				if isZero(v) {
					continue // e.g. optional: false, omitted when encoded
				}
				return fmt.Errorf("unknown field %q", strings.TrimPrefix(path+"."+k, "."))
			}
			if err := sameKeys(path+"."+k, v, tv); err != nil {
				return err
			}
		}
	case []any:
		tl, ok := typed.([]any)
		if !ok || len(tl) != len(r) {
			return fmt.Errorf("%s: list changed once decoded", path)
		}
		for i := range r {
			if err := sameKeys(fmt.Sprintf("%s[%d]", path, i), r[i], tl[i]); err != nil {
				return err
			}
		}
	}
	return nil
}

func isZero(v any) bool {
	switch x := v.(type) {
	case nil:
		return true
	case bool:
		return !x
	case string:
		return x == ""
	case float64:
		return x == 0
	}
	return false
}

var (
	docSeparator = regexp.MustCompile(`(?m)^---[ \t]*(#.*)?$`)
	commentLine  = regexp.MustCompile(`(?m)^\s*#.*$`)
)

// loadKubernetes decodes every document of every YAML file in
// deploy/kubernetes into its k8s.io/api type.
func loadKubernetes(t *testing.T) kubeManifests {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(kubernetesDir, "*.y*ml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests in %s (%v)", kubernetesDir, err)
	}
	m := kubeManifests{configMaps: map[string]*corev1.ConfigMap{}}
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range docSeparator.Split(string(data), -1) {
			if strings.TrimSpace(commentLine.ReplaceAllString(doc, "")) == "" {
				continue
			}
			where := fmt.Sprintf("%s document %d", filepath.Base(file), i+1)
			var tm metav1.TypeMeta
			if err := yaml.Unmarshal([]byte(doc), &tm); err != nil {
				t.Fatalf("%s: %v", where, err)
			}
			var obj any
			switch tm.APIVersion + " " + tm.Kind {
			case "batch/v1 Job":
				obj = &batchv1.Job{}
			case "v1 ConfigMap":
				obj = &corev1.ConfigMap{}
			case "v1 Service":
				obj = &corev1.Service{}
			case "networking.k8s.io/v1 NetworkPolicy":
				obj = &networkingv1.NetworkPolicy{}
			case "kustomize.config.k8s.io/v1beta1 Kustomization":
				obj = &kustomization{}
			default:
				t.Fatalf("%s: %s %s: add its type to this test so it is checked", where, tm.APIVersion, tm.Kind)
			}
			if err := decodeStrict([]byte(doc), obj); err != nil {
				t.Fatalf("%s (%s): %v", where, tm.Kind, err)
			}
			switch o := obj.(type) {
			case *batchv1.Job:
				m.jobs = append(m.jobs, o)
			case *corev1.ConfigMap:
				m.configMaps[o.Name] = o
			case *corev1.Service:
				m.services = append(m.services, o)
			case *networkingv1.NetworkPolicy:
				m.policies = append(m.policies, o)
			case *kustomization:
				m.kustomize = append(m.kustomize, o)
			}
		}
	}
	return m
}

// The decoding is strict: a misspelt, unknown, duplicate or wrongly cased
// field in a manifest fails the test.
func TestKubernetesDecodeIsStrict(t *testing.T) {
	good := "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\ndata:\n  A: b\n"
	if err := decodeStrict([]byte(good), &corev1.ConfigMap{}); err != nil {
		t.Fatalf("a valid ConfigMap: %v", err)
	}
	for _, bad := range []string{
		"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\ndatas:\n  A: b\n",
		"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\n  name: y\n",
		"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: x\nData:\n  A: b\n",
		"apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: [x]\n",
	} {
		if err := decodeStrict([]byte(bad), &corev1.ConfigMap{}); err == nil {
			t.Errorf("accepted:\n%s", bad)
		}
	}
	job := "apiVersion: batch/v1\nkind: Job\nspec:\n  template:\n    spec:\n      initContainers:\n      - name: a\n        restartpolicy: Always\n"
	if err := decodeStrict([]byte(job), &batchv1.Job{}); err == nil {
		t.Errorf("accepted restartpolicy for restartPolicy")
	}
}

// trainingPod is the Job of deploy/kubernetes and its three roles.
type trainingPod struct {
	job                     *batchv1.Job
	spec                    *corev1.PodSpec
	restore, agent, trainer *corev1.Container
	doctor                  *corev1.Container
	restoreAt, agentAt      int // indexes among the init containers
	doctorAt                int
	m                       kubeManifests
}

func loadTrainingPod(t *testing.T) trainingPod {
	t.Helper()
	m := loadKubernetes(t)
	if len(m.jobs) != 1 {
		t.Fatalf("%d Jobs in %s, want the one training Job", len(m.jobs), kubernetesDir)
	}
	p := trainingPod{job: m.jobs[0], spec: &m.jobs[0].Spec.Template.Spec, m: m, restoreAt: -1, agentAt: -1, doctorAt: -1}
	for i := range p.spec.InitContainers {
		c := &p.spec.InitContainers[i]
		switch ferrySubcommand(c) {
		case "restore":
			p.restore, p.restoreAt = c, i
		case "agent":
			p.agent, p.agentAt = c, i
		case "doctor":
			p.doctor, p.doctorAt = c, i
		}
	}
	for i := range p.spec.Containers {
		c := &p.spec.Containers[i]
		if len(scriptFerryCalls(c)) > 0 {
			p.trainer = c
		}
	}
	if p.restore == nil || p.agent == nil || p.trainer == nil {
		t.Fatalf("want init containers running ferry restore and ferry agent and a container running ferry flush; got restore %v, agent %v, trainer %v",
			p.restore != nil, p.agent != nil, p.trainer != nil)
	}
	return p
}

// ferrySubcommand is the ferry command a container of the ferry image
// runs: its first argument (the image's entrypoint is ferry).
func ferrySubcommand(c *corev1.Container) string {
	if len(c.Command) > 0 || len(c.Args) == 0 || c.Image != ferryImage && !strings.Contains(c.Image, "/ferry:") {
		return ""
	}
	return c.Args[0]
}

var ferryCall = regexp.MustCompile(`(?m)(?:^|[;&|(!]|\bthen|\bdo|\bif)[ \t]*ferry[ \t]+([^\n;&|)]*)`)

// scriptFerryCalls are the ferry command lines in a container's shell
// script (command: [/bin/sh, -c]).
func scriptFerryCalls(c *corev1.Container) [][]string {
	script := shellScript(c)
	var calls [][]string
	for _, m := range ferryCall.FindAllStringSubmatch(script, -1) {
		args := strings.Fields(m[1])
		for i, a := range args {
			args[i] = strings.Trim(a, `"'`)
		}
		calls = append(calls, args)
	}
	return calls
}

func shellScript(c *corev1.Container) string {
	cmd := append(slices.Clone(c.Command), c.Args...)
	if len(cmd) == 3 && strings.HasSuffix(cmd[0], "sh") && cmd[1] == "-c" {
		return cmd[2]
	}
	return ""
}

// envOf resolves a container's environment as the kubelet would, with
// sample values for what only a running pod knows: the completion index is
// 1, the Job's UID a fixed UUID, a Secret's key "secret-<key>". It also
// returns where each variable came from.
func envOf(t *testing.T, c *corev1.Container, cms map[string]*corev1.ConfigMap) (env map[string]string, from map[string]*corev1.EnvVarSource) {
	t.Helper()
	env, from = map[string]string{}, map[string]*corev1.EnvVarSource{}
	for _, ef := range c.EnvFrom {
		switch {
		case ef.ConfigMapRef != nil:
			cm := cms[ef.ConfigMapRef.Name]
			if cm == nil {
				t.Fatalf("container %s: envFrom ConfigMap %q is not in %s", c.Name, ef.ConfigMapRef.Name, kubernetesDir)
			}
			for k, v := range cm.Data {
				env[ef.Prefix+k] = v
			}
		default:
			t.Fatalf("container %s: envFrom other than a ConfigMap: extend this test", c.Name)
		}
	}
	for _, e := range c.Env {
		if _, dup := from[e.Name]; dup {
			t.Errorf("container %s: %s set twice", c.Name, e.Name)
		}
		switch vf := e.ValueFrom; {
		case vf == nil:
			env[e.Name] = expandKube(t, c.Name, e.Value, env)
		case vf.FieldRef != nil:
			switch vf.FieldRef.FieldPath {
			case completionIndex, completionLabel:
				env[e.Name] = "1"
			case jobUID:
				env[e.Name] = "3f0c1c8e-9d1a-4c59-a1a4-5a0f6c2b9e17"
			default:
				env[e.Name] = "field"
			}
		case vf.SecretKeyRef != nil:
			env[e.Name] = "secret-" + vf.SecretKeyRef.Key
		case vf.ConfigMapKeyRef != nil:
			cm := cms[vf.ConfigMapKeyRef.Name]
			if cm == nil {
				t.Fatalf("container %s: %s from ConfigMap %q, not in %s", c.Name, e.Name, vf.ConfigMapKeyRef.Name, kubernetesDir)
			}
			env[e.Name] = cm.Data[vf.ConfigMapKeyRef.Key]
		default:
			env[e.Name] = "1"
		}
		from[e.Name] = e.ValueFrom
	}
	return env, from
}

var kubeVar = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// expandKube expands $(NAME) as the kubelet does in env values and args;
// a name the container does not define is an error here (the kubelet
// would pass "$(NAME)" on as it is).
func expandKube(t *testing.T, container, s string, env map[string]string) string {
	t.Helper()
	return kubeVar.ReplaceAllStringFunc(s, func(m string) string {
		name := kubeVar.FindStringSubmatch(m)[1]
		v, ok := env[name]
		if !ok {
			t.Errorf("container %s: %s refers to %s, which it does not define", container, s, name)
		}
		return v
	})
}

// ferryCommands are ferry's commands as the binary builds them.
func ferryCommands() []*cli.Command {
	return []*cli.Command{newPushCommand(), newRestoreCommand(), newListCommand(), newShowCommand(),
		newStatusCommand(), newFlushCommand(), newPruneCommand(), newAgentCommand(), newVersionCommand(), newDoctorCommand()}
}

// parsedCommand is a ferry command line as ferry's own flag definitions
// read it, with env as the whole environment.
type parsedCommand struct {
	name    string
	envVars map[string]bool // every FERRY_ variable the command reads
	ctx     *cli.Context
}

// parseFerry parses args (without "ferry") through ferry's real command
// definitions with env as the process environment, and checks what the
// command itself would check before doing anything: node count, rank and
// run identity, sizes, rates, durations, layout. Nothing runs.
func parseFerry(t *testing.T, args []string, env map[string]string) (parsedCommand, error) {
	t.Helper()
	for _, kv := range os.Environ() {
		if k, _, _ := strings.Cut(kv, "="); strings.HasPrefix(k, "FERRY_") {
			t.Setenv(k, "")
			os.Unsetenv(k)
		}
	}
	for k, v := range env {
		t.Setenv(k, v)
	}
	var got parsedCommand
	cmds := ferryCommands()
	for _, cmd := range cmds {
		cmd.Action = func(c *cli.Context) error {
			got = parsedCommand{name: c.Command.Name, envVars: map[string]bool{}, ctx: c}
			for _, f := range c.Command.Flags {
				if ev, ok := f.(interface{ GetEnvVars() []string }); ok {
					for _, name := range ev.GetEnvVars() {
						got.envVars[name] = true
					}
				}
			}
			if c.Args().Len() > 0 {
				return fmt.Errorf("unexpected arguments %q", c.Args().Slice())
			}
			return checkValues(c, env)
		}
	}
	app := &cli.App{Name: "ferry", Writer: io.Discard, ErrWriter: io.Discard, Commands: cmds,
		ExitErrHandler: func(*cli.Context, error) {}}
	for _, cmd := range cmds {
		cmd.OnUsageError = func(_ *cli.Context, err error, _ bool) error { return err }
	}
	if len(args) == 0 || !slices.ContainsFunc(cmds, func(c *cli.Command) bool { return c.Name == args[0] }) {
		return got, fmt.Errorf("ferry %s: no such command", strings.Join(args, " "))
	}
	err := app.RunContext(context.Background(), append([]string{"ferry"}, args...))
	return got, err
}

// checkValues applies the checks a command makes of its flag values
// before it starts.
func checkValues(c *cli.Context, env map[string]string) error {
	switch c.Command.Name {
	case "agent", "doctor":
		if _, err := readNodes(c, func(k string) string { return env[k] }); err != nil {
			return err
		}
		if _, err := sizeFlag(c, "part-size"); err != nil {
			return err
		}
		if _, err := rateFlag(c, "bandwidth"); err != nil {
			return err
		}
		if !isKnownLayout(c.String("layout")) {
			return fmt.Errorf("--layout %q: unknown", c.String("layout"))
		}
		if c.Duration("drain-timeout") <= 0 || c.Duration("settle") <= 0 {
			return fmt.Errorf("--drain-timeout and --settle must be positive")
		}
		if _, err := parseLocation("to", c.String("to")); err != nil {
			return err
		}
	case "restore":
		if err := checkStepFlag(c); err != nil {
			return err
		}
		if _, err := rateFlag(c, "low-speed-limit"); err != nil {
			return err
		}
		if n, r := c.Int("nodes"), c.Int("node-rank"); c.IsSet("nodes") && (r < 0 || r >= n) {
			return fmt.Errorf("--node-rank %d of --nodes %d", r, n)
		}
		if _, err := parseLocation("from", c.String("from")); err != nil {
			return err
		}
	case "flush":
		if c.Duration("timeout") < 0 {
			return fmt.Errorf("--timeout %v: negative", c.Duration("timeout"))
		}
	}
	return nil
}

// The checker itself catches what it is for.
func TestKubernetesParseFerryCatchesMistakes(t *testing.T) {
	env := map[string]string{"FERRY_WATCH": "/ckpt", "FERRY_TO": "s3://bucket/run"}
	if _, err := parseFerry(t, []string{"agent"}, env); err != nil {
		t.Fatalf("a valid agent: %v", err)
	}
	for _, c := range []struct {
		args []string
		env  map[string]string
	}{
		{[]string{"agent", "--drain-timout", "5m"}, env},
		{[]string{"restor", "--to", "/ckpt"}, env},
		{[]string{"agent"}, map[string]string{"FERRY_WATCH": "/ckpt", "FERRY_TO": "s3://bucket/run", "FERRY_NODES": "2", "FERRY_NODE_RANK": "2"}},
		{[]string{"agent"}, map[string]string{"FERRY_WATCH": "/ckpt", "FERRY_TO": "s3://bucket/run", "FERRY_DRAIN_TIMEOUT": "300"}},
		{[]string{"agent"}, map[string]string{"FERRY_WATCH": "/ckpt", "FERRY_TO": "s3://bucket/run", "FERRY_PART_SIZE": "lots"}},
		{[]string{"restore", "--to", "/ckpt", "--nodes", "2", "--node-rank", "5"}, map[string]string{"FERRY_FROM": "s3://bucket/run"}},
		{[]string{"flush", "--timeout", "soon"}, nil},
	} {
		if _, err := parseFerry(t, c.args, c.env); err == nil {
			t.Errorf("ferry %s with %v: accepted", strings.Join(c.args, " "), c.env)
		}
	}
}

// Every ferry command, flag and FERRY_ variable the manifests use exists,
// every value parses, and each container is given only FERRY_ variables
// its own ferry command reads (a variable meant for another command is a
// silent no-op, as a misspelt one would be).
func TestKubernetesFerryCommandsExist(t *testing.T) {
	p := loadTrainingPod(t)
	for _, c := range append(slices.Clone(p.spec.InitContainers), p.spec.Containers...) {
		env, _ := envOf(t, &c, p.m.configMaps)
		var lines [][]string
		if sub := ferrySubcommand(&c); sub != "" {
			args := make([]string, len(c.Args))
			for i, a := range c.Args {
				args[i] = expandKube(t, c.Name, a, env)
			}
			lines = append(lines, args)
		}
		lines = append(lines, scriptFerryCalls(&c)...)
		read := map[string]bool{}
		for _, args := range lines {
			got, err := parseFerry(t, args, env)
			if err != nil {
				t.Errorf("container %s: ferry %s: %v", c.Name, strings.Join(args, " "), err)
				continue
			}
			for k := range got.envVars {
				read[k] = true
			}
		}
		for k := range env {
			if strings.HasPrefix(k, "FERRY_") && !read[k] {
				t.Errorf("container %s: %s is set, but no ferry command it runs reads it", c.Name, k)
			}
		}
	}
}

// The structure the issue asks for: restore first, the agent as a native
// sidecar, credentials from a Secret, node rank and count from the Indexed
// Job, a grace period that covers the flush and the drain, and the same
// checkpoint dir, state dir and bucket everywhere.
func TestKubernetesTrainingJob(t *testing.T) {
	p := loadTrainingPod(t)
	job, spec := p.job, p.spec
	if job.Spec.CompletionMode == nil || *job.Spec.CompletionMode != batchv1.IndexedCompletion {
		t.Fatalf("the Job's completionMode must be Indexed: the completion index is the node rank")
	}
	if job.Spec.Parallelism == nil || job.Spec.Completions == nil || *job.Spec.Parallelism != *job.Spec.Completions {
		t.Fatalf("parallelism and completions must be set and equal (one pod per node, all at once)")
	}
	nodes := fmt.Sprint(*job.Spec.Parallelism)
	if spec.RestartPolicy != corev1.RestartPolicyNever {
		t.Errorf("pod restartPolicy %q, want Never (a training job restarts as a whole)", spec.RestartPolicy)
	}

	// Restore runs to completion before the agent and the trainer start.
	if p.restoreAt > p.agentAt {
		t.Errorf("ferry-restore is init container %d, after the agent (%d): restore first", p.restoreAt, p.agentAt)
	}
	if p.restore.RestartPolicy != nil {
		t.Errorf("ferry-restore has restartPolicy %s: it must run to completion before the trainer", *p.restore.RestartPolicy)
	}
	if p.agent.RestartPolicy == nil || *p.agent.RestartPolicy != corev1.ContainerRestartPolicyAlways {
		t.Errorf("ferry-agent must be a native sidecar (restartPolicy: Always), or the Job never completes")
	}
	if p.restore.Image != p.agent.Image {
		t.Errorf("restore image %s, agent image %s: use one ferry image", p.restore.Image, p.agent.Image)
	}

	renv, rfrom := envOf(t, p.restore, p.m.configMaps)
	aenv, afrom := envOf(t, p.agent, p.m.configMaps)
	tenv, _ := envOf(t, p.trainer, p.m.configMaps)
	rargs := map[string]string{}
	for i, a := range p.restore.Args {
		if strings.HasPrefix(a, "--") && i+1 < len(p.restore.Args) && !strings.HasPrefix(p.restore.Args[i+1], "--") {
			rargs[a] = p.restore.Args[i+1]
		}
	}

	// Credentials come from a Secret, never from a value in a manifest.
	for _, c := range []struct {
		name string
		from map[string]*corev1.EnvVarSource
	}{{p.restore.Name, rfrom}, {p.agent.Name, afrom}} {
		secret := ""
		for _, k := range []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"} {
			src := c.from[k]
			if src == nil || src.SecretKeyRef == nil {
				t.Errorf("container %s: %s must come from a Secret (secretKeyRef)", c.name, k)
				continue
			}
			if secret != "" && src.SecretKeyRef.Name != secret {
				t.Errorf("container %s: keys from two Secrets, %s and %s", c.name, secret, src.SecretKeyRef.Name)
			}
			secret = src.SecretKeyRef.Name
		}
	}
	secretish := regexp.MustCompile(`(?i)secret|access_key|token|password`)
	for _, c := range append(slices.Clone(spec.InitContainers), spec.Containers...) {
		for _, e := range c.Env {
			// A *_FILE variable names where a secret is (a Secret's
			// volume), not the secret.
			if e.ValueFrom == nil && secretish.MatchString(e.Name) && !strings.HasSuffix(e.Name, "_FILE") {
				t.Errorf("container %s: %s has a value in the manifest; take it from a Secret", c.Name, e.Name)
			}
		}
	}
	for name, cm := range p.m.configMaps {
		for k := range cm.Data {
			if secretish.MatchString(k) {
				t.Errorf("ConfigMap %s holds %s: credentials belong in a Secret", name, k)
			}
		}
	}

	// Node rank and count: from the completion index and parallelism.
	if src := afrom["FERRY_NODE_RANK"]; src == nil || src.FieldRef == nil ||
		(src.FieldRef.FieldPath != completionIndex && src.FieldRef.FieldPath != completionLabel) {
		t.Errorf("ferry-agent: FERRY_NODE_RANK must come from the pod's completion index (%s)", completionIndex)
	}
	if aenv["FERRY_NODES"] != nodes {
		t.Errorf("ferry-agent: FERRY_NODES=%q, want the Job's parallelism %s", aenv["FERRY_NODES"], nodes)
	}
	if expandKube(t, p.restore.Name, rargs["--nodes"], renv) != nodes {
		t.Errorf("ferry-restore: --nodes %q, want the Job's parallelism %s", rargs["--nodes"], nodes)
	}
	if m := kubeVar.FindStringSubmatch(rargs["--node-rank"]); m == nil || rfrom[m[1]] == nil || rfrom[m[1]].FieldRef == nil ||
		(rfrom[m[1]].FieldRef.FieldPath != completionIndex && rfrom[m[1]].FieldRef.FieldPath != completionLabel) {
		t.Errorf("ferry-restore: --node-rank %q must be $(VAR) of a variable from the completion index", rargs["--node-rank"])
	}
	// A new run identity per Job, the same on every pod of it.
	if src := afrom["FERRY_RUN_ID"]; src == nil || src.FieldRef == nil || src.FieldRef.FieldPath != jobUID {
		t.Errorf("ferry-agent: FERRY_RUN_ID must be the Job's UID (%s)", jobUID)
	}

	// The grace period covers the trainer's flush and then the agent's drain.
	if spec.TerminationGracePeriodSeconds == nil {
		t.Fatalf("terminationGracePeriodSeconds is not set (the default 30 s cuts the drain)")
	}
	grace := time.Duration(*spec.TerminationGracePeriodSeconds) * time.Second
	drain := durationOr(t, aenv["FERRY_DRAIN_TIMEOUT"], agent.DefaultDrainTimeout)
	flush := durationOr(t, tenv["FERRY_FLUSH_TIMEOUT"], 15*time.Minute)
	for _, call := range scriptFerryCalls(p.trainer) {
		if i := slices.Index(call, "--timeout"); i >= 0 && i+1 < len(call) {
			flush = durationOr(t, call[i+1], flush)
		}
	}
	if grace <= drain {
		t.Errorf("terminationGracePeriodSeconds %v must exceed FERRY_DRAIN_TIMEOUT %v", grace, drain)
	}
	if grace <= drain+flush {
		t.Errorf("terminationGracePeriodSeconds %v must cover the flush (%v) and then the drain (%v)", grace, flush, drain)
	}

	// One bucket location, one checkpoint dir, one state dir.
	if renv["FERRY_FROM"] == "" || renv["FERRY_FROM"] != aenv["FERRY_TO"] || tenv["FERRY_TO"] != aenv["FERRY_TO"] {
		t.Errorf("restore FERRY_FROM %q, agent FERRY_TO %q, trainer FERRY_TO %q: the same location, please",
			renv["FERRY_FROM"], aenv["FERRY_TO"], tenv["FERRY_TO"])
	}
	ckpt := rargs["--to"]
	if ckpt == "" || aenv["FERRY_WATCH"] != ckpt || tenv["FERRY_WATCH"] != ckpt {
		t.Errorf("restore --to %q, agent FERRY_WATCH %q, trainer FERRY_WATCH %q: the same directory, please",
			ckpt, aenv["FERRY_WATCH"], tenv["FERRY_WATCH"])
	}
	sameVolume(t, ckpt, p.restore, p.agent, p.trainer)
	if aenv["FERRY_STATE_DIR"] == "" || tenv["FERRY_STATE_DIR"] != aenv["FERRY_STATE_DIR"] {
		t.Errorf("agent FERRY_STATE_DIR %q, trainer %q: flush finds the agent's socket there", aenv["FERRY_STATE_DIR"], tenv["FERRY_STATE_DIR"])
	}
	sameVolume(t, aenv["FERRY_STATE_DIR"], p.agent, p.trainer)
	vols := map[string]bool{}
	for _, v := range spec.Volumes {
		vols[v.Name] = true
	}
	for _, c := range append(slices.Clone(spec.InitContainers), spec.Containers...) {
		for _, vm := range c.VolumeMounts {
			if !vols[vm.Name] {
				t.Errorf("container %s mounts volume %s, which the pod does not have", c.Name, vm.Name)
			}
		}
	}

	// The headless Service gives the pods the names the trainer uses.
	if len(p.m.services) == 1 {
		svc := p.m.services[0]
		if spec.Subdomain != svc.Name || svc.Spec.ClusterIP != corev1.ClusterIPNone || svc.Spec.Selector["job-name"] != job.Name {
			t.Errorf("Service %s: want headless, selecting job-name=%s, and the pod's subdomain", svc.Name, job.Name)
		}
		if host := job.Name + "-0." + svc.Name; !strings.Contains(shellScript(p.trainer), host) {
			t.Errorf("the trainer does not use node 0's name %s", host)
		}
	}
}

func durationOr(t *testing.T, s string, def time.Duration) time.Duration {
	t.Helper()
	if s == "" {
		return def
	}
	d, err := time.ParseDuration(s)
	if err != nil {
		t.Errorf("duration %q: %v", s, err)
	}
	return d
}

// sameVolume checks that dir is a mount of one volume in every container.
func sameVolume(t *testing.T, dir string, cs ...*corev1.Container) {
	t.Helper()
	vol := ""
	for _, c := range cs {
		found := ""
		for _, vm := range c.VolumeMounts {
			if vm.MountPath == dir {
				found = vm.Name
			}
		}
		switch {
		case found == "":
			t.Errorf("container %s does not mount %s", c.Name, dir)
		case vol != "" && found != vol:
			t.Errorf("container %s mounts volume %s at %s, another container %s", c.Name, found, dir, vol)
		}
		vol = found
	}
}

// The trainer's script, run by /bin/sh with a fake torchrun and a fake
// ferry: flush runs after the trainer has exited, on success, failure and
// SIGTERM, and the container's exit status is the trainer's (or 1 when
// only the flush failed).
func TestKubernetesTrainerScript(t *testing.T) {
	p := loadTrainingPod(t)
	env, _ := envOf(t, p.trainer, p.m.configMaps)
	cmdline := append(slices.Clone(p.trainer.Command), p.trainer.Args...)
	fakes := t.TempDir()
	// The fake trainer runs TICKS x 0.1 s, then exits RC; on SIGTERM it
	// exits 143, as torchrun does.
	writeExecutable(t, filepath.Join(fakes, "torchrun"), `#!/bin/sh
echo "torchrun start" >>"$FAKE_LOG"
trap 'echo "torchrun TERM" >>"$FAKE_LOG"; exit 143' TERM
i=0
while [ "$i" -lt "$FAKE_TICKS" ]; do sleep 0.1; i=$((i+1)); done
echo "torchrun exit $FAKE_RC" >>"$FAKE_LOG"
exit "$FAKE_RC"
`)
	writeExecutable(t, filepath.Join(fakes, "ferry"), `#!/bin/sh
echo "ferry $* state=$FERRY_STATE_DIR watch=$FERRY_WATCH to=$FERRY_TO" >>"$FAKE_LOG"
exit "$FAKE_FLUSH_RC"
`)
	wantFlush := fmt.Sprintf("ferry flush state=%s watch=%s to=%s", env["FERRY_STATE_DIR"], env["FERRY_WATCH"], env["FERRY_TO"])
	cases := []struct {
		name      string
		ticks, rc int
		flushRC   int
		term      bool
		want      []string
		wantExit  int
	}{
		{"success", 3, 0, 0, false, []string{"torchrun start", "torchrun exit 0", wantFlush}, 0},
		{"trainer fails", 3, 7, 0, false, []string{"torchrun start", "torchrun exit 7", wantFlush}, 7},
		{"flush fails", 3, 0, 1, false, []string{"torchrun start", "torchrun exit 0", wantFlush}, 1},
		{"both fail", 3, 7, 1, false, []string{"torchrun start", "torchrun exit 7", wantFlush}, 7},
		{"SIGTERM", 300, 0, 0, true, []string{"torchrun start", "torchrun TERM", wantFlush}, 143},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			log := filepath.Join(t.TempDir(), "log")
			cmd := exec.Command(cmdline[0], cmdline[1:]...)
			cmd.Env = []string{"PATH=" + fakes + ":/usr/bin:/bin", "FAKE_LOG=" + log,
				fmt.Sprintf("FAKE_TICKS=%d", c.ticks), fmt.Sprintf("FAKE_RC=%d", c.rc), fmt.Sprintf("FAKE_FLUSH_RC=%d", c.flushRC)}
			for k, v := range env {
				cmd.Env = append(cmd.Env, k+"="+v)
			}
			var out bytes.Buffer
			cmd.Stdout, cmd.Stderr = &out, &out
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			if c.term {
				waitForLine(t, log, "torchrun start")
				time.Sleep(100 * time.Millisecond) // the shell is in wait
				if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
					t.Fatal(err)
				}
			}
			done := make(chan error, 1)
			go func() { done <- cmd.Wait() }()
			var err error
			select {
			case err = <-done:
			case <-time.After(30 * time.Second):
				_ = cmd.Process.Kill()
				t.Fatalf("the script did not exit within 30 s; output: %s", out.String())
			}
			code := 0
			if ee, ok := err.(*exec.ExitError); ok {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			data, _ := os.ReadFile(log)
			got := strings.Split(strings.TrimSpace(string(data)), "\n")
			if !slices.Equal(got, c.want) || code != c.wantExit {
				t.Errorf("exit %d, calls:\n  %s\nwant exit %d, calls:\n  %s\noutput: %s", code, strings.Join(got, "\n  "),
					c.wantExit, strings.Join(c.want, "\n  "), out.String())
			}
		})
	}
}

func writeExecutable(t *testing.T, path, content string) {
	t.Helper()
	if err := os.WriteFile(path, []byte(content), 0o755); err != nil {
		t.Fatal(err)
	}
}

func waitForLine(t *testing.T, path, line string) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if data, err := os.ReadFile(path); err == nil && strings.Contains(string(data), line) {
			return
		}
	}
	t.Fatalf("%q never appeared in %s", line, path)
}

// The two mistakes a first deployment makes, run as the containers run
// them (same arguments, same environment, the local S3 server for the
// endpoint): each ends in one line from ferry, which is what `kubectl
// logs` shows. A correct setup restores (nothing yet) and exits 0.
func TestKubernetesMistakesInContainerLog(t *testing.T) {
	srv := s3test.Shared(t)
	p := loadTrainingPod(t)
	bucket := srv.NewBucket(t)
	renv, _ := envOf(t, p.restore, p.m.configMaps)
	aenv, _ := envOf(t, p.agent, p.m.configMaps)
	denv, _ := envOf(t, p.doctor, p.m.configMaps)
	ckpt := t.TempDir()

	// procEnv is a container's environment on this machine: the endpoint
	// and region of the test server, the bucket URL with the given bucket,
	// local directories, and the Secret's keys when it exists.
	procEnv := func(env map[string]string, bucketName string, secret bool) []string {
		var out []string
		for k, v := range env {
			switch {
			case k == "AWS_ACCESS_KEY_ID" || k == "AWS_SECRET_ACCESS_KEY":
				continue
			case k == "FERRY_ENDPOINT":
				v = srv.Endpoint
			case k == "FERRY_REGION":
				v = srv.Region
			case k == "FERRY_FROM" || k == "FERRY_TO":
				v = "s3://" + bucketName + "/runs/train"
			case k == "FERRY_WATCH":
				v = ckpt
			case k == "FERRY_STATE_DIR":
				v = t.TempDir()
			case k == "FERRY_METRICS_ADDR":
				v = "off"
			case k == "FERRY_PEER_TOKEN_FILE": // the Secret ferry-peer's file
				v = filepath.Join(t.TempDir(), "token")
				if err := os.WriteFile(v, []byte("a-peer-token\n"), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			out = append(out, k+"="+v)
		}
		if secret {
			out = append(out, "AWS_ACCESS_KEY_ID="+srv.AccessKey, "AWS_SECRET_ACCESS_KEY="+srv.SecretKey)
		}
		return append(out, "HOME="+t.TempDir(), "PATH="+os.Getenv("PATH"), "FERRY_CLI_MAIN=1", "FERRY_PRIORITY=normal")
	}
	restoreArgs := func() []string {
		var args []string
		for i, a := range p.restore.Args {
			if i > 0 && p.restore.Args[i-1] == "--to" {
				a = ckpt // the checkpoint volume
			}
			args = append(args, expandKube(t, p.restore.Name, a, renv))
		}
		return args
	}
	run := func(args, env []string) (int, string) {
		cmd := exec.Command(os.Args[0], args...)
		cmd.Env = env
		var out, errb bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &errb
		done := make(chan error, 1)
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			code := 0
			if ee, ok := err.(*exec.ExitError); ok {
				code = ee.ExitCode()
			} else if err != nil {
				t.Fatal(err)
			}
			return code, out.String() + errb.String()
		case <-time.After(60 * time.Second):
			_ = cmd.Process.Kill()
			t.Fatalf("ferry %s did not exit within 60 s", strings.Join(args, " "))
			return 0, ""
		}
	}
	oneLine := func(what, out, want string) {
		t.Helper()
		lines := strings.Split(strings.TrimSpace(out), "\n")
		last := lines[len(lines)-1]
		if !strings.HasPrefix(last, "ferry: ") || !strings.Contains(last, want) {
			t.Errorf("%s: the log ends with %q, want ferry's one line naming %q; log:\n%s", what, last, want, out)
		}
		for _, l := range lines[:len(lines)-1] {
			if strings.HasPrefix(l, "ferry: ") {
				t.Errorf("%s: more than one error line:\n%s", what, out)
			}
		}
		t.Logf("%s: %s", what, last)
	}

	// ferry-doctor, first: its failed check with the fix, then the count.
	doctorFails := func(what, out, check, want string) {
		t.Helper()
		if !regexp.MustCompile(`(?m)^fail ` + check + `: .*` + regexp.QuoteMeta(want) + `.*; fix: `).MatchString(out) {
			t.Errorf("%s: no %q fail line naming %q with its fix; log:\n%s", what, check, want, out)
		}
		oneLine(what, out, "checks failed")
	}

	// The Secret is missing: the keys are absent (optional), no metadata
	// service is asked (AWS_EC2_METADATA_DISABLED), and ferry says so.
	code, out := run(p.doctor.Args, procEnv(denv, bucket, false))
	if code != exitFailure {
		t.Errorf("doctor without the Secret: exit %d, want 1; log:\n%s", code, out)
	}
	doctorFails("doctor without the Secret", out, "credentials", "no usable AWS credentials")
	code, out = run(restoreArgs(), procEnv(renv, bucket, false))
	if code != exitFailure {
		t.Errorf("restore without the Secret: exit %d, want 1; log:\n%s", code, out)
	}
	oneLine("restore without the Secret", out, "credentials")
	code, out = run(p.agent.Args, procEnv(aenv, bucket, false))
	if code != exitFailure {
		t.Errorf("agent without the Secret: exit %d, want 1; log:\n%s", code, out)
	}
	oneLine("agent without the Secret", out, "credentials")

	// A bucket that does not exist.
	code, out = run(p.doctor.Args, procEnv(denv, "my-bucket", true))
	if code != exitFailure {
		t.Errorf("doctor with a missing bucket: exit %d, want 1; log:\n%s", code, out)
	}
	doctorFails("doctor with a missing bucket", out, "bucket", `"my-bucket" does not exist`)
	code, out = run(restoreArgs(), procEnv(renv, "my-bucket", true))
	if code != exitFailure {
		t.Errorf("restore from a missing bucket: exit %d, want 1; log:\n%s", code, out)
	}
	oneLine("restore from a missing bucket", out, "my-bucket")
	code, out = run(p.agent.Args, procEnv(aenv, "my-bucket", true))
	if code != exitFailure {
		t.Errorf("agent to a missing bucket: exit %d, want 1; log:\n%s", code, out)
	}
	oneLine("agent to a missing bucket", out, "my-bucket")

	// Right: doctor passes, and the first run starts fresh.
	code, out = run(p.doctor.Args, procEnv(denv, bucket, true))
	if code != exitOK || strings.Contains(out, "\nfail ") {
		t.Errorf("doctor, right setup: exit %d, want 0 and no failed check; log:\n%s", code, out)
	}
	code, out = run(restoreArgs(), procEnv(renv, bucket, true))
	if code != exitOK || !strings.Contains(out, "starting fresh") {
		t.Errorf("restore, first run: exit %d, want 0 and 'starting fresh'; log:\n%s", code, out)
	}
}

// dockerStage is what a Dockerfile stage says about the image it makes.
type dockerStage struct{ from, user, entrypoint string }

// finalStage reads the Dockerfile's last stage, with what it inherits from
// the stages it is built FROM, and the image at the root of that chain.
func finalStage(t *testing.T) dockerStage {
	t.Helper()
	data, err := os.ReadFile(dockerfile)
	if err != nil {
		t.Fatal(err)
	}
	stages := map[string]*dockerStage{}
	var last *dockerStage
	for _, line := range strings.Split(string(data), "\n") {
		fields := strings.Fields(line)
		if len(fields) < 2 {
			continue
		}
		switch strings.ToUpper(fields[0]) {
		case "FROM":
			last = &dockerStage{from: fields[1]}
			if len(fields) == 4 && strings.EqualFold(fields[2], "AS") {
				stages[fields[3]] = last
			}
		case "USER":
			last.user = fields[1]
		case "ENTRYPOINT":
			last.entrypoint = strings.Join(fields[1:], " ")
		}
	}
	if last == nil {
		t.Fatalf("%s has no FROM", dockerfile)
	}
	got := *last
	for parent := stages[got.from]; parent != nil; parent = stages[parent.from] {
		got.from = parent.from
		if got.user == "" {
			got.user = parent.user
		}
		if got.entrypoint == "" {
			got.entrypoint = parent.entrypoint
		}
	}
	return got
}

// The image the manifests run: its entrypoint is ferry (the containers
// give only arguments), on an empty base, as a non-root user.
func TestDeployDockerfile(t *testing.T) {
	final := finalStage(t)
	if final.from != "scratch" {
		t.Errorf("the image is built on %s, want scratch", final.from)
	}
	if uid, _, _ := strings.Cut(final.user, ":"); uid == "" || strings.Trim(uid, "0") == "" || strings.Trim(uid, "0123456789") != "" {
		t.Errorf("USER %q: want a numeric non-root user (Kubernetes' runAsNonRoot checks it)", final.user)
	}
	var ep []string
	if err := json.Unmarshal([]byte(final.entrypoint), &ep); err != nil || len(ep) != 1 || filepath.Base(ep[0]) != "ferry" {
		t.Errorf("ENTRYPOINT %s: want the exec form naming only the ferry binary (no shell in the image)", final.entrypoint)
	}
	p := loadTrainingPod(t)
	for _, c := range []*corev1.Container{p.restore, p.agent} {
		if len(c.Command) != 0 {
			t.Errorf("container %s sets command %v; the image's entrypoint is ferry", c.Name, c.Command)
		}
	}
	if !strings.Contains(strings.Join(strings.Fields(shellScript(p.trainer)), " "), "ferry flush") {
		t.Errorf("the trainer never runs ferry flush")
	}
}

// ferry doctor runs first, to completion, with the agent's settings and
// credentials and the folders mounted where the agent has them: a setup
// that cannot work stops the pod before the restore and the trainer.
func TestKubernetesDoctorFirst(t *testing.T) {
	p := loadTrainingPod(t)
	if p.doctor == nil || p.doctorAt != 0 {
		t.Fatalf("want ferry doctor as the first init container (at %d)", p.doctorAt)
	}
	if p.doctor.RestartPolicy != nil {
		t.Errorf("ferry-doctor has restartPolicy %s: it must run to completion before the restore", *p.doctor.RestartPolicy)
	}
	if p.doctor.Image != p.agent.Image {
		t.Errorf("doctor image %s, agent image %s", p.doctor.Image, p.agent.Image)
	}
	denv, dfrom := envOf(t, p.doctor, p.m.configMaps)
	aenv, _ := envOf(t, p.agent, p.m.configMaps)
	agentOnly := map[string]bool{"FERRY_NODES": true, "FERRY_NODE_RANK": true, "FERRY_RUN_ID": true}
	for k, v := range aenv {
		if strings.HasPrefix(k, "FERRY_") && !agentOnly[k] && denv[k] != v {
			t.Errorf("doctor's %s=%q, the agent's %q: doctor must check the agent's settings", k, denv[k], v)
		}
	}
	for _, k := range []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"} {
		if src := dfrom[k]; src == nil || src.SecretKeyRef == nil {
			t.Errorf("ferry-doctor: %s must come from the agent's Secret", k)
		}
	}
	mounts := func(c *corev1.Container) map[string]string {
		m := map[string]string{}
		for _, vm := range c.VolumeMounts {
			m[vm.MountPath] = vm.Name
		}
		return m
	}
	dm, am := mounts(p.doctor), mounts(p.agent)
	for _, dir := range []string{aenv["FERRY_WATCH"], aenv["FERRY_STATE_DIR"]} {
		if dm[dir] == "" || dm[dir] != am[dir] {
			t.Errorf("%s: doctor mounts %q, the agent %q: the same volume, please", dir, dm[dir], am[dir])
		}
	}
}
