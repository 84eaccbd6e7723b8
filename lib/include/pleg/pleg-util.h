/* SPDX-License-Identifier: Apache-2.0 */
/*
 * Durations in Go syntax and feature gates in kubelet syntax.
 */
#pragma once

#include <glib.h>

G_BEGIN_DECLS

/**
 * PLEG_DURATION_ERROR:
 *
 * Error domain of Go durations (#PlegDurationError).  Messages quote the text, escaped and cut
 * with pleg_log_text().
 */
#define PLEG_DURATION_ERROR (pleg_duration_error_quark())

/**
 * pleg_duration_error_quark:
 *
 * Returns: the quark of %PLEG_DURATION_ERROR.
 *
 * Thread safety: callable from any thread.
 */
GQuark pleg_duration_error_quark(void);

/**
 * PlegDurationError:
 * @PLEG_DURATION_ERROR_INVALID: the text is not a Go duration, or it overflows 2^63 ns.
 *
 * Codes of %PLEG_DURATION_ERROR.
 */
typedef enum {
    PLEG_DURATION_ERROR_INVALID,
} PlegDurationError;

/**
 * pleg_duration_parse:
 * @text: a Go duration such as "500ms", "1.5s", "3m", "1h2m3s" ("ns", "us", "µs", "ms",
 *   "s", "m", "h"; a bare "0" is allowed).
 * @ret_usec: (out): the duration in microseconds, rounded toward zero; untouched on failure.
 * @error: %PLEG_DURATION_ERROR_INVALID naming @text when it is not a duration or overflows.
 *
 * Parses like Go's time.ParseDuration.
 *
 * Thread safety: callable from any thread.
 *
 * Returns: %TRUE when @text is a duration.
 */
gboolean pleg_duration_parse(const char *text, gint64 *ret_usec, GError **error);

/**
 * pleg_duration_format:
 * @usec: a duration in microseconds.
 *
 * Formats like Go's time.Duration.String(): "3m0s", "1.5s", "500ms", "0s".
 *
 * Thread safety: callable from any thread.
 *
 * Returns: (transfer full): the text.
 */
char *pleg_duration_format(gint64 usec);

/**
 * pleg_time_format_rfc3339:
 * @unix_ns: Unix time in nanoseconds.
 *
 * Thread safety: callable from any thread.
 *
 * Returns: (transfer full): UTC time with nanoseconds, e.g. "2026-11-29T15:38:55.123456789Z".
 */
char *pleg_time_format_rfc3339(gint64 unix_ns);

/* The bytes of the longest text pleg_time_format_rfc3339() gives and its NUL:
 * "YYYY-MM-DDTHH:MM:SS.nnnnnnnnnZ". */
#define PLEG_TIME_RFC3339_SIZE 31

/**
 * pleg_time_format_rfc3339_to_buffer:
 * @unix_ns: Unix time in nanoseconds.
 * @buffer: (out caller-allocates): at least %PLEG_TIME_RFC3339_SIZE bytes.
 *
 * pleg_time_format_rfc3339() without an allocation, for a caller that formats a time per event.
 *
 * Thread safety: callable from any thread.
 *
 * Returns: the length of the text written to @buffer, without its NUL.
 *
 * Since: 0.2
 */
gsize pleg_time_format_rfc3339_to_buffer(gint64 unix_ns, char buffer[PLEG_TIME_RFC3339_SIZE]);

/**
 * PlegFeatureStage:
 * @PLEG_FEATURE_ALPHA: "Alpha".
 * @PLEG_FEATURE_BETA: "Beta".
 * @PLEG_FEATURE_GA: "GA".
 * @PLEG_FEATURE_DEPRECATED: "Deprecated".
 *
 * Maturity of a feature gate, as Kubernetes names it (k8s.io/component-base/featuregate).
 */
typedef enum {
    PLEG_FEATURE_ALPHA,
    PLEG_FEATURE_BETA,
    PLEG_FEATURE_GA,
    PLEG_FEATURE_DEPRECATED,
} PlegFeatureStage;

/**
 * pleg_feature_stage_to_string:
 * @stage: a stage.
 *
 * Thread safety: callable from any thread.
 *
 * Returns: (transfer none): kubelet's spelling, "Alpha", "Beta", "GA" or "Deprecated";
 *   "unknown" for a value outside the enum.
 */
const char *pleg_feature_stage_to_string(PlegFeatureStage stage);

/**
 * pleg_feature_stage_from_string:
 * @text: "Alpha", "Beta", "GA" or "Deprecated", exactly (case matters, as in kubelet).
 * @ret_stage: (out) (optional): the stage; untouched on failure.
 *
 * Thread safety: callable from any thread.
 *
 * Returns: whether @text names a stage.
 */
gboolean pleg_feature_stage_from_string(const char *text, PlegFeatureStage *ret_stage);

/* Names of the gates libpleg knows, spelled as kubelet spells them. */
#define PLEG_FEATURE_EVENTED_PLEG "EventedPLEG"
#define PLEG_FEATURE_SYSTEMD_WATCHDOG "SystemdWatchdog"
#define PLEG_FEATURE_KUBELET_WATCHDOG_DIAGNOSTICS "KubeletWatchdogDiagnostics"
#define PLEG_FEATURE_CRI_LIST_STREAMING "CRIListStreaming"

/**
 * PLEG_FEATURE_GATE_ERROR:
 *
 * Error domain of the feature gates (#PlegFeatureGateError).  Messages are kubelet's where
 * kubelet has one ("unrecognized feature gate: Bogus"); untrusted text in them is escaped and
 * cut with pleg_log_text().
 */
#define PLEG_FEATURE_GATE_ERROR (pleg_feature_gate_error_quark())

/**
 * pleg_feature_gate_error_quark:
 *
 * Returns: the quark of %PLEG_FEATURE_GATE_ERROR.
 *
 * Thread safety: callable from any thread.
 */
GQuark pleg_feature_gate_error_quark(void);

/**
 * PlegFeatureGateError:
 * @PLEG_FEATURE_GATE_ERROR_UNKNOWN: a name that is neither built in nor registered.
 * @PLEG_FEATURE_GATE_ERROR_MALFORMED: a `--feature-gates` item that is not `Name=value`.
 * @PLEG_FEATURE_GATE_ERROR_BAD_VALUE: a value that is not a boolean in Go's spelling.
 * @PLEG_FEATURE_GATE_ERROR_BAD_NAME: a declared name that is not a gate name.
 * @PLEG_FEATURE_GATE_ERROR_BAD_STAGE: a declared stage outside #PlegFeatureStage.
 * @PLEG_FEATURE_GATE_ERROR_REDEFINED: a declaration of a built-in gate.
 * @PLEG_FEATURE_GATE_ERROR_CONFLICT: a gate declared before with another stage or default.
 *
 * Codes of %PLEG_FEATURE_GATE_ERROR.
 */
typedef enum {
    PLEG_FEATURE_GATE_ERROR_UNKNOWN,
    PLEG_FEATURE_GATE_ERROR_MALFORMED,
    PLEG_FEATURE_GATE_ERROR_BAD_VALUE,
    PLEG_FEATURE_GATE_ERROR_BAD_NAME,
    PLEG_FEATURE_GATE_ERROR_BAD_STAGE,
    PLEG_FEATURE_GATE_ERROR_REDEFINED,
    PLEG_FEATURE_GATE_ERROR_CONFLICT,
} PlegFeatureGateError;

typedef struct _PlegFeatureGates PlegFeatureGates;

/**
 * pleg_feature_gates_new:
 *
 * A registry holding every built-in gate at its default: EventedPLEG (alpha, off),
 * SystemdWatchdog (beta, on), KubeletWatchdogDiagnostics (alpha, off), CRIListStreaming (alpha,
 * off).  Gates that plugins
 * declare join with pleg_feature_gates_register() (or pleg_feature_gates_register_plugins() in
 * pleg-host.h), which must come before the gates are parsed from flags or a configuration file.
 *
 * Thread safety: callable from any thread.  The registry has no lock: configure it (register,
 * parse, set, load) from one thread at a time and before sharing it; once configuration is
 * done, reads (enabled, known) are safe from any thread.
 *
 * Returns: (transfer full): the gates.
 */
PlegFeatureGates *pleg_feature_gates_new(void);

/**
 * pleg_feature_gates_free:
 * @gates: (nullable): the gates.
 *
 * Frees @gates.  NULL-safe.
 *
 * Thread safety: not while another thread uses @gates.
 */
void pleg_feature_gates_free(PlegFeatureGates *gates);
G_DEFINE_AUTOPTR_CLEANUP_FUNC(PlegFeatureGates, pleg_feature_gates_free)

/**
 * pleg_feature_gates_parse:
 * @text: kubelet's `--feature-gates` syntax, "Name=true,Other=false"; spaces around items
 *   are allowed, an empty string sets nothing.
 * @error: %PLEG_FEATURE_GATE_ERROR: %PLEG_FEATURE_GATE_ERROR_UNKNOWN naming the gate,
 *   %PLEG_FEATURE_GATE_ERROR_BAD_VALUE naming the item, %PLEG_FEATURE_GATE_ERROR_MALFORMED
 *   naming the item without `=`.
 *
 * Applies all items or none: on failure no gate changed.  The last setting of a gate wins.
 *
 * Thread safety: a configuration call: not concurrently with any other use of @gates.
 *
 * Returns: %TRUE when every item applied.
 */
gboolean pleg_feature_gates_parse(PlegFeatureGates *gates, const char *text, GError **error);

/**
 * pleg_feature_gates_set:
 *
 * @gates: the gates.
 * @name: a gate name, built in or registered.
 * @enabled: its new value.
 * @error: %PLEG_FEATURE_GATE_ERROR_UNKNOWN when @name is unknown.
 *
 * Sets one known gate.
 *
 * Thread safety: a configuration call: not concurrently with any other use of @gates.
 *
 * Returns: %TRUE when the gate is set.
 */
gboolean pleg_feature_gates_set(PlegFeatureGates *gates, const char *name, gboolean enabled,
                                GError **error);

/**
 * pleg_feature_gates_enabled:
 *
 * @gates: the gates.
 * @name: (nullable): a gate name.
 *
 * Returns: whether the known gate @name is on; %FALSE for an unknown name.
 *
 * Thread safety: callable from any thread once configuration is done; not concurrently with a
 * configuration call.
 */
gboolean pleg_feature_gates_enabled(const PlegFeatureGates *gates, const char *name);

/**
 * pleg_feature_gates_known:
 * @ret_stage: (out) (optional): the gate's stage.
 * @ret_default: (out) (optional): the gate's default.
 *
 * Returns: whether @name is a known gate: built in, or registered in @gates.
 *
 * Thread safety: like pleg_feature_gates_enabled().
 */
gboolean pleg_feature_gates_known(const PlegFeatureGates *gates, const char *name,
                                  PlegFeatureStage *ret_stage, gboolean *ret_default);

/* The default cut of pleg_log_text(), in bytes of the input. */
#define PLEG_LOG_TEXT_MAX 256

/**
 * pleg_log_text:
 * @text: (nullable): untrusted text for a log line or error message: a flag value, a line of a
 *   file, a message from a peer; any bytes, not necessarily UTF-8.
 * @length: bytes of @text, or -1 when it is NUL-terminated.
 * @max_bytes: how many bytes of @text to keep at most, 0 for %PLEG_LOG_TEXT_MAX.
 *
 * Escapes and truncates @text so that it can be put into a message as it is: printable UTF-8
 * is kept, a backslash becomes `\\`, newline, carriage return and tab become `\n`, `\r`, `\t`,
 * other control characters and bytes that are not UTF-8 become `\xNN`, unprintable non-ASCII
 * characters `\uNNNN`.  Text longer than @max_bytes is cut before the first character that
 * does not fit, and "... (N bytes in all)" is appended.  libpleg and plegd run every piece of
 * untrusted text that goes into a message through this.
 *
 * Returns: (transfer full): the escaped text; "(null)" for %NULL.
 *
 * Thread safety: callable from any thread.
 */
char *pleg_log_text(const char *text, gssize length, gsize max_bytes);
/**
 * pleg_feature_gates_register:
 * @gates: the gates to add to.
 * @name: the gate's name: an upper-case ASCII letter, then letters and digits ("ProbeGate").
 * @stage: its stage.
 * @default_enabled: its value until something sets it.
 * @origin: (nullable): who declares it, for messages (a `.plugin` file's path); copied.
 * @error: %PLEG_FEATURE_GATE_ERROR: %PLEG_FEATURE_GATE_ERROR_BAD_NAME when @name is not a gate
 *   name, %PLEG_FEATURE_GATE_ERROR_BAD_STAGE for a @stage outside the enum,
 *   %PLEG_FEATURE_GATE_ERROR_REDEFINED when it names a built-in gate (a plugin may not redefine
 *   EventedPLEG, SystemdWatchdog, KubeletWatchdogDiagnostics or CRIListStreaming),
 *   %PLEG_FEATURE_GATE_ERROR_CONFLICT when it was registered before with another stage or
 *   default (the message names both origins).
 *
 * Adds a gate that a plugin declares, at its default.  Registering the same name again with the
 * same stage and default changes nothing and succeeds (two plugins may share a gate), whatever
 * value the gate has by then.  A registered gate is then accepted by pleg_feature_gates_parse(),
 * pleg_feature_gates_set() and pleg_feature_gates_load_key_file() like a built-in one.
 *
 * Thread safety: a configuration call: not concurrently with any other use of @gates.
 *
 * Returns: %TRUE when the gate is registered.
 */
gboolean pleg_feature_gates_register(PlegFeatureGates *gates, const char *name,
                                     PlegFeatureStage stage, gboolean default_enabled,
                                     const char *origin, GError **error);

/**
 * pleg_feature_gates_is_builtin:
 * @name: (nullable): a gate name.
 *
 * Thread safety: callable from any thread.
 *
 * Returns: whether @name is one of libpleg's built-in gates.
 */
gboolean pleg_feature_gates_is_builtin(const char *name);

/**
 * pleg_get_version:
 *
 * The version of the libpleg a program runs with, which may be another than the one it was
 * built against (a `libpleg.so.0` installed later): meson's project version, "0.3.0".  plegd
 * shows it as the `libpleg_version` label of `plegd_build_info`.
 *
 * Returns: (transfer none): the version, static.
 *
 * Thread safety: callable from any thread.
 */
const char *pleg_get_version(void);

G_END_DECLS
