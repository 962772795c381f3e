"""Forms of the researcher pages: the episode list's filters, the batch, ablation-matrix and
evaluation-run launch forms, the annotation queue's decision and the harness task form."""

from __future__ import annotations

import zipfile
from typing import Any
from urllib.parse import urlencode

from django import forms
from django.core.files.uploadedfile import UploadedFile
from django.db.models import Model

from harness_app.harness.ablation import MECHANISMS, REFERENCE_CONDITIONS, condition_name
from harness_app.ids import MAX_ID, as_id, id_problem
from harness_app.models import Benchmark, PolicyConfig, RetrieverKind
from trajectories.models import (
    ENDED_REASONS,
    TERMINATION_REASONS,
    AnnotationLabel,
    AnnotationStatus,
    EpisodeKind,
    EpisodeStatus,
    TerminationPolicy,
)
from trajectories.selectors.episode_list import RANGE_FIELDS, SORTS
from trajectories.services import evaluations
from trajectories.services.ablations import MAX_RUNS, matrix_policies
from trajectories.services.harness_runs import (
    MAX_FILE_BYTES,
    MAX_FILES,
    MAX_REPOSITORY_BYTES,
    MAX_TIMEOUT_S,
)
from trajectories.services.rollouts import MAX_SAMPLES_PER_QUERY, MAX_TURNS_LIMIT
from trajectories.teacher_rule import RULE_KEYS, TeacherRuleError, teacher_rule_clean

# The reasons docs/rollouts.md lists, offered as suggestions; any recorded reason filters.
KNOWN_REASONS = TERMINATION_REASONS
RATIO_FIELDS = ("curated_recall", "final_answer_recall", "trajectory_recall")
_RATIO_ATTRS = {"step": "0.01", "min": "0", "max": "1", "inputmode": "decimal"}
SORT_LABELS = {
    "newest": "Newest first",
    "oldest": "Oldest first",
    "reward_desc": "Reward, high to low",
    "reward_asc": "Reward, low to high",
    "curated_recall_desc": "Curated recall, high to low",
    "curated_recall_asc": "Curated recall, low to high",
    "final_answer_recall_desc": "Final-answer recall, high to low",
    "final_answer_recall_asc": "Final-answer recall, low to high",
    "trajectory_recall_desc": "Trajectory recall, high to low",
    "trajectory_recall_asc": "Trajectory recall, low to high",
    "turns_desc": "Most turns",
    "turns_asc": "Fewest turns",
    "tool_diversity_desc": "Most tools used",
    "tool_diversity_asc": "Fewest tools used",
}


def _range_field(name: str, bound: str) -> forms.Field:
    label = f"{name.replace('_', ' ')} {bound}"
    if name in RATIO_FIELDS:
        attrs = {"step": "0.01", "min": "0", "max": "1", "inputmode": "decimal"}
        return forms.FloatField(required=False, label=label, widget=forms.NumberInput(attrs))
    if name == "reward":
        return forms.FloatField(
            required=False, label=label, widget=forms.NumberInput({"step": "0.01"})
        )
    return forms.IntegerField(required=False, min_value=0, label=label)


class IdChoiceField(forms.ModelChoiceField):
    """A choice by id that refuses what is not an id before querying: a number past 64
    bits would otherwise make the driver raise OverflowError (harness_app/ids.py)."""

    def to_python(self, value: Any) -> Any:
        if value in self.empty_values:
            return None
        if as_id(value) is None:
            raise forms.ValidationError(id_problem(value), code="invalid_choice")
        return super().to_python(value)


class EpisodeFilterForm(forms.Form):
    """GET parameters of the episode list; the URL is the permalink of a filter."""

    q = forms.CharField(required=False, max_length=200, label="Query text contains")
    batch = forms.IntegerField(required=False, min_value=1, max_value=MAX_ID, label="Batch #")
    benchmark = IdChoiceField(
        Benchmark.objects.only("pk", "name").order_by("name"),
        required=False,
        empty_label="any",
    )
    policy = IdChoiceField(
        PolicyConfig.objects.only("pk", "name").order_by("name"),
        required=False,
        empty_label="any",
    )
    ablation = forms.CharField(required=False, max_length=200, label="Ablation label")
    status = forms.ChoiceField(required=False, choices=[("", "any"), *EpisodeStatus.choices])
    kind = forms.ChoiceField(
        required=False, choices=[("", "any"), *EpisodeKind.choices], label="Kind"
    )
    termination_reason = forms.CharField(
        required=False,
        max_length=40,
        widget=forms.TextInput({"list": "termination-reasons"}),
    )
    annotation_status = forms.ChoiceField(
        required=False, choices=[("", "any"), *AnnotationStatus.choices], label="Annotation"
    )
    query = forms.IntegerField(
        required=False, min_value=1, max_value=MAX_ID, widget=forms.HiddenInput
    )
    sort = forms.ChoiceField(
        required=False, choices=[(k, SORT_LABELS[k]) for k in SORTS], initial="newest"
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        for name in RANGE_FIELDS:
            self.fields[f"{name}_min"] = _range_field(name, "min")
            self.fields[f"{name}_max"] = _range_field(name, "max")

    @property
    def known_reasons(self) -> tuple[str, ...]:
        return KNOWN_REASONS

    def range_pairs(self) -> list[tuple[forms.BoundField, forms.BoundField]]:
        return [(self[f"{n}_min"], self[f"{n}_max"]) for n in RANGE_FIELDS]

    def filters(self) -> dict[str, Any]:
        """The valid filters; an invalid field is reported on the form and ignored."""
        self.is_valid()
        return dict(getattr(self, "cleaned_data", {}))

    def query_string(self) -> str:
        """The filters as a canonical query string (no page), for permalinks."""
        pairs = []
        for name, value in self.filters().items():
            if value in (None, ""):
                continue
            pairs.append((name, value.pk if isinstance(value, Model) else value))
        return urlencode(pairs)


class AnnotationLabelForm(forms.Form):
    """One decision in the annotation queue. Its rules (a rejection needs a reason) live in
    services.annotations, so the page and the API refuse the same things; the view puts a
    refused decision's error on the field the service names."""

    label = forms.ChoiceField(choices=AnnotationLabel.choices)
    reason = forms.CharField(required=False, max_length=200)
    notes = forms.CharField(required=False, widget=forms.Textarea)


class SavedFilterForm(forms.Form):
    name = forms.CharField(max_length=100, label="Save this filter as")
    query_string = forms.CharField(required=False, max_length=2000, widget=forms.HiddenInput)


def _preselect_single(field: forms.Field) -> None:
    """A choice with a single option comes chosen, without the empty "---------" line."""
    queryset = field.queryset  # type: ignore[attr-defined]
    only = list(queryset[:2])
    if len(only) == 1:
        field.initial = only[0].pk
        field.empty_label = None  # type: ignore[attr-defined]


class BatchLaunchForm(forms.Form):
    """Launch parameters. The bounds live in services.batch_create, which reports a bad
    value as BatchParameterError; the view shows it on the field the error names."""

    benchmark = forms.ModelChoiceField(Benchmark.objects.order_by("name"))
    policy = forms.ModelChoiceField(PolicyConfig.objects.order_by("name"))
    # The default follows the chosen policy (static/js/batch_launch.js, until one is typed).
    SAMPLES_DETERMINISTIC, SAMPLES_SAMPLED = 1, 4
    samples_per_query = forms.IntegerField(
        initial=SAMPLES_SAMPLED,
        help_text="Samples per query: the group size for group-relative advantages. "
        "Defaults to 1 for a deterministic policy, whose samples would all be the same "
        "episode, and to 4 otherwise.",
        widget=forms.NumberInput({"min": 1, "max": MAX_SAMPLES_PER_QUERY}),
    )
    query_limit = forms.IntegerField(
        required=False, help_text="Run only the first N queries; empty runs them all."
    )
    max_turns = forms.IntegerField(
        initial=40, widget=forms.NumberInput({"min": 1, "max": MAX_TURNS_LIMIT})
    )
    termination_policy = forms.ChoiceField(
        choices=TerminationPolicy.choices, initial=TerminationPolicy.MAX_TURNS
    )
    ablate = forms.MultipleChoiceField(
        required=False,
        choices=[(m, m) for m in MECHANISMS],  # one name per mechanism, as on every page
        widget=forms.CheckboxSelectMultiple,
        label="Switch off",
        help_text="Mechanisms to ablate; none checked runs the full harness. The batch is "
        "labelled -<mechanism> for each.",
    )
    # The teacher-batch section (docs/rollouts.md, "Teacher batches").
    without_tokens = forms.BooleanField(
        required=False,
        label="The server returns no token ids",
        help_text="For a hosted OpenAI-compatible API: plain chat completions, calls recorded "
        "without tokens; SFT exports rebuild them with the student's chat template.",
    )
    teacher = forms.BooleanField(
        required=False,
        label="Teacher batch",
        help_text="Only completed episodes that pass the filter rule below enter the "
        "annotation queue; the others are kept, out of the queue.",
    )
    curated_recall_min = forms.FloatField(
        required=False, label="Curated recall ≥", widget=forms.NumberInput(_RATIO_ATTRS)
    )
    final_answer_recall_min = forms.FloatField(
        required=False, label="Final-answer recall ≥", widget=forms.NumberInput(_RATIO_ATTRS)
    )
    trajectory_recall_min = forms.FloatField(
        required=False, label="Trajectory recall ≥", widget=forms.NumberInput(_RATIO_ATTRS)
    )
    format_errors_max = forms.IntegerField(
        required=False, label="Format errors ≤", help_text="0: no format errors."
    )
    turns_max = forms.IntegerField(required=False, label="Turns ≤")
    termination_reasons = forms.MultipleChoiceField(
        required=False,
        choices=[(r, r) for r in ENDED_REASONS],
        widget=forms.CheckboxSelectMultiple,
        label="Termination reason in",
        help_text="None checked: any reason.",
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.policies = list(self.fields["policy"].queryset)  # type: ignore[attr-defined]
        for name in ("benchmark", "policy"):
            _preselect_single(self.fields[name])
        samples = self.fields["samples_per_query"]
        chosen = self.initial.get("policy") or self.fields["policy"].initial
        samples.initial = self._samples_default(chosen)
        samples.widget.attrs["data-deterministic-default"] = self.SAMPLES_DETERMINISTIC
        samples.widget.attrs["data-sampled-default"] = self.SAMPLES_SAMPLED
        if not self.is_bound:  # a value sent back is the researcher's own
            samples.widget.attrs["data-follows-policy"] = "true"

    def _samples_default(self, policy: Any) -> int:
        try:
            deterministic = int(policy) in self.deterministic_policy_ids()
        except (TypeError, ValueError):
            deterministic = False
        return self.SAMPLES_DETERMINISTIC if deterministic else self.SAMPLES_SAMPLED

    def deterministic_policy_ids(self) -> list[int]:
        """The policies whose samples of a query all come out the same (baseline, greedy),
        for which more than one sample per query only repeats the work."""
        return [p.pk for p in self.policies if p.is_deterministic]

    def warns_samples(self) -> bool:
        """Whether the form, as drawn, pairs a deterministic policy with several samples;
        static/js/batch_launch.js keeps the same warning live as the fields change."""
        policy, samples = self["policy"].value(), self["samples_per_query"].value()
        try:
            return int(policy) in self.deterministic_policy_ids() and int(samples) > 1
        except (TypeError, ValueError):
            return False

    def clean(self) -> dict[str, Any]:
        """The rule is checked by teacher_rule_clean, so the form and the API agree; its
        errors go on the clause's field. `teacher_rule` is None for an ordinary batch."""
        data = super().clean() or {}
        raw = {key: data.get(key) for key in RULE_KEYS}
        data["teacher_rule"] = None
        if not data.get("teacher"):
            if any(value not in (None, "", []) for value in raw.values()):
                self.add_error("teacher", "Tick “Teacher batch” to use a filter rule.")
            return data
        try:
            data["teacher_rule"] = teacher_rule_clean(raw)
        except TeacherRuleError as exc:
            self.add_error(exc.field if exc.field in self.fields else None, exc.detail)
        return data

    TEACHER_FIELDS = ("without_tokens", "teacher", *RULE_KEYS)

    def main_fields(self) -> list[forms.BoundField]:
        return [self[name] for name in self.fields if name not in self.TEACHER_FIELDS]

    def teacher_fields(self) -> list[forms.BoundField]:
        return [self[name] for name in self.TEACHER_FIELDS]


class ConditionsField(forms.MultipleChoiceField):
    """Ablation conditions by their one name; the reference's older names (`minus_verify`,
    ...) are still accepted and read as the one name (ablation.CONDITION_ALIASES)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(choices=[(name, name) for name in REFERENCE_CONDITIONS], **kwargs)

    def to_python(self, value: Any) -> list[str]:
        return [condition_name(name) for name in super().to_python(value)]


class AblationMatrixLaunchForm(forms.Form):
    """An ablation matrix: the named conditions x N runs over a benchmark. The bounds live in
    services.ablations.ablation_matrix_create; the view shows its errors on their field."""

    benchmark = forms.ModelChoiceField(Benchmark.objects.order_by("name"))
    policy = forms.ChoiceField(
        choices=[],
        initial="baseline",
        help_text="Policies that run in the worker's process, without a model server.",
    )
    runs = forms.IntegerField(
        initial=3,
        help_text="Runs of every condition; each metric is reported as mean ± std across runs.",
        widget=forms.NumberInput({"min": 1, "max": MAX_RUNS}),
    )
    query_limit = forms.IntegerField(
        required=False,
        label="Query limit",
        help_text="Only the first N judged queries; empty runs them all.",
        widget=forms.NumberInput({"min": 1}),
    )
    max_turns = forms.IntegerField(
        initial=40, widget=forms.NumberInput({"min": 1, "max": MAX_TURNS_LIMIT})
    )
    retriever = forms.ChoiceField(
        choices=RetrieverKind.choices,
        initial=RetrieverKind.BM25,
        help_text="What every condition's search tool ranks with. Dense and hybrid embed "
        "the corpus first if it has no embeddings yet (minutes per 10,000 documents on a CPU).",
    )
    conditions = ConditionsField(
        initial=list(REFERENCE_CONDITIONS),
        widget=forms.CheckboxSelectMultiple,
        error_messages={"required": "Choose at least one condition."},
        help_text="Harness-1's named ablation conditions; all run in one worker process.",
    )

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        policy = self.fields["policy"]
        assert isinstance(policy, forms.ChoiceField)
        policy.choices = [(name, name) for name in matrix_policies()]

    def clean_conditions(self) -> list[str]:
        # In the reference's order, whatever order the browser sent them in.
        chosen = set(self.cleaned_data["conditions"])
        return [name for name in REFERENCE_CONDITIONS if name in chosen]


class EvaluationRunLaunchForm(forms.Form):
    """An evaluation run: benchmarks x policy configs x conditions x runs, one batch each. The
    bounds live in services.evaluations.evaluation_create; the view shows its errors on their
    field."""

    name = forms.CharField(required=False, max_length=200)
    benchmarks = forms.ModelMultipleChoiceField(
        Benchmark.objects.order_by("name"),
        widget=forms.CheckboxSelectMultiple,
        error_messages={"required": "Choose at least one benchmark."},
        help_text="The transfer table's rows.",
    )
    policies = forms.ModelMultipleChoiceField(
        PolicyConfig.objects.order_by("name"),
        label="Policy configs",
        widget=forms.CheckboxSelectMultiple,
        error_messages={"required": "Choose at least one policy config."},
        help_text="Baseline and model policies alike run on the rollout workers.",
    )
    conditions = ConditionsField(
        initial=["full"],
        widget=forms.CheckboxSelectMultiple,
        error_messages={"required": "Choose at least one condition."},
        help_text="Each policy config runs under each condition: a configuration is the pair.",
    )
    runs = forms.IntegerField(
        initial=3,
        help_text="Runs of every cell; each metric is reported as mean ± std across runs.",
        widget=forms.NumberInput({"min": 1, "max": evaluations.MAX_RUNS}),
    )
    query_limit = forms.IntegerField(
        required=False,
        label="Query limit",
        help_text="Only the first N queries of each benchmark; empty runs them all.",
        widget=forms.NumberInput({"min": 1}),
    )
    max_turns = forms.IntegerField(
        initial=40, widget=forms.NumberInput({"min": 1, "max": MAX_TURNS_LIMIT})
    )

    def clean_conditions(self) -> list[str]:
        chosen = set(self.cleaned_data["conditions"])
        return [name for name in REFERENCE_CONDITIONS if name in chosen]


class RecordingCreateForm(forms.Form):
    """The recording page's new-session form; the sampling overrides are checked again,
    field by field, by `sampling_overrides_parse` when the session is created."""

    name = forms.CharField(required=False, max_length=200)
    task = forms.CharField(
        required=False, max_length=200, help_text="sessions with the same task are one RL group"
    )
    ttl_hours = forms.FloatField(
        label="Key valid for (hours)",
        initial=24,
        min_value=0.02,
        widget=forms.NumberInput({"step": "any"}),
    )
    temperature = forms.FloatField(
        required=False,
        help_text="replaces the agent's, 0 to 2",
        widget=forms.NumberInput({"step": "any"}),
    )
    top_p = forms.FloatField(
        required=False,
        help_text="replaces the agent's, above 0 up to 1",
        widget=forms.NumberInput({"step": "any"}),
    )
    max_tokens = forms.IntegerField(required=False, help_text="ceiling for every call's max_tokens")
    model_map = forms.CharField(
        required=False,
        label="Model map",
        help_text='one "asked=served" per line; "*=served" maps every other name',
        widget=forms.Textarea({"rows": 3}),
    )

    def clean_model_map(self) -> dict[str, str]:
        mapping: dict[str, str] = {}
        for number, line in enumerate(self.cleaned_data["model_map"].splitlines(), start=1):
            if not line.strip():
                continue
            asked, sep, served = line.partition("=")
            if not sep or not asked.strip() or not served.strip():
                raise forms.ValidationError(f'line {number}: write "asked=served", got {line!r}')
            mapping[asked.strip()] = served.strip()
        return mapping

    def ttl_s(self) -> int:
        return round(self.cleaned_data["ttl_hours"] * 3600)

    def sampling(self) -> dict[str, Any]:
        """The overrides as the service takes them, leaving out what was left empty."""
        keys = ("model_map", "temperature", "top_p", "max_tokens")
        return {k: self.cleaned_data[k] for k in keys if self.cleaned_data[k] not in (None, {})}


class HarnessTaskCreateForm(forms.Form):
    """A harness task from the page. `harness_runs.harness_task_create` checks it as it checks
    POST /api/harness-tasks/ (paths, sizes, timeouts); the view shows a refusal on the field
    the service names. The repository comes as JSON, as in the API, or as a .zip."""

    name = forms.CharField(max_length=200)
    instruction = forms.CharField(
        widget=forms.Textarea({"rows": 4}), help_text="What the agent is asked to do."
    )
    # Not `files`: a form's `files` are its uploads.
    repository = forms.JSONField(
        required=False,
        label="Files (JSON)",
        widget=forms.Textarea({"rows": 6, "class": "mono"}),
        help_text='The repository as {relative path: text}, e.g. {"calc.py": "def add(a, b):'
        '\\n    return a - b\\n"}. Blank: an empty repository, or the .zip below.',
    )
    archive = forms.FileField(
        required=False,
        label="Or a .zip of the repository",
        help_text="Text files only; a single top folder is the repository's root.",
    )
    eval_command = forms.CharField(
        label="Evaluation command",
        widget=forms.Textarea({"rows": 2, "class": "mono"}),
        help_text="Run in the repository after the agent: exit 0 scores 1.0, anything else "
        "0.0, unless its last line of output is reward: <number>.",
    )
    timeout_s = forms.IntegerField(
        initial=600, label="Harness timeout (s)", help_text=f"1 to {MAX_TIMEOUT_S} seconds."
    )
    eval_timeout_s = forms.IntegerField(
        initial=120, label="Evaluation timeout (s)", help_text=f"1 to {MAX_TIMEOUT_S} seconds."
    )

    def clean_archive(self) -> dict[str, str] | None:
        upload = self.cleaned_data.get("archive")
        return None if upload is None else repository_from_zip(upload)

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        if data.get("archive") is not None and data.get("repository") not in (None, "", {}):
            self.add_error("archive", "Give the files as JSON or as a .zip, not both.")
        return data

    def task_files(self) -> Any:
        """The files as the service takes them; it checks them."""
        archive = self.cleaned_data["archive"]
        if archive is not None:
            return archive
        files = self.cleaned_data["repository"]
        return {} if files in (None, "") else files

    def files_field(self) -> str:
        """The field that holds the files, for the service's errors on `files`."""
        return "repository" if self.cleaned_data["archive"] is None else "archive"


def repository_from_zip(upload: UploadedFile) -> dict[str, str]:
    """{relative path: text} of a zip's files, read within the service's limits so that a
    large or compressed-to-nothing upload is refused before it is unpacked."""
    try:
        with zipfile.ZipFile(upload) as archive:
            members = [m for m in archive.infolist() if not m.is_dir()]
            if len(members) > MAX_FILES:
                raise forms.ValidationError(
                    f"At most {MAX_FILES} files; the .zip has {len(members)}."
                )
            files, total = {}, 0
            for member in members:
                files[member.filename] = _member_text(archive, member)
                total += len(files[member.filename].encode())
                if total > MAX_REPOSITORY_BYTES:
                    raise forms.ValidationError(
                        f"The files come to more than {MAX_REPOSITORY_BYTES} bytes."
                    )
            return _strip_top_folder(files)
    except zipfile.BadZipFile:
        raise forms.ValidationError("This is not a .zip file.") from None


def _member_text(archive: zipfile.ZipFile, member: zipfile.ZipInfo) -> str:
    with archive.open(member) as stream:
        data = stream.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:
        raise forms.ValidationError(f"{member.filename!r} is larger than {MAX_FILE_BYTES} bytes.")
    try:
        return data.decode()
    except UnicodeDecodeError:
        raise forms.ValidationError(f"{member.filename!r} is not UTF-8 text.") from None


def _strip_top_folder(files: dict[str, str]) -> dict[str, str]:
    # `zip -r repo.zip repo/` puts every file under repo/: that folder is the root.
    tops = {name.split("/", 1)[0] for name in files}
    if len(tops) != 1 or not all("/" in name for name in files):
        return files
    return {name.split("/", 1)[1]: text for name, text in files.items()}
