package verdict

// verdict writes v's members in the order of its fields, as encoding/json writes the
// struct: Verdict.AppendJSON.
func (w *jsonWriter) verdict(v *Verdict) {
	w.raw(`{"schemaVersion":`)
	w.int(int64(v.SchemaVersion))
	w.raw(`,"outcome":`)
	w.str(string(v.Outcome))
	w.raw(`,"reasonCode":`)
	w.str(string(v.ReasonCode))
	w.raw(`,"humanReason":`)
	w.str(v.HumanReason)
	w.raw(`,"triggeringPolicyField":`)
	w.optString(v.TriggeringPolicyField)
	w.raw(`,"checks":`)
	writeArray(w, v.Checks, (*jsonWriter).check)
	w.raw(`,"evidence":{"decodedAction":`)
	w.object(v.Evidence.DecodedAction)
	w.raw(`,"observations":`)
	w.object(v.Evidence.Observations)
	w.raw(`,"sources":`)
	writeArray(w, v.Evidence.Sources, (*jsonWriter).value)
	w.raw(`},"policyVersion":`)
	if v.PolicyVersion == nil {
		w.raw("null")
	} else {
		w.int(*v.PolicyVersion)
	}
	w.raw(`,"latencyMs":`)
	w.int(v.LatencyMs)
	w.raw(`,"dataFreshness":{"overall":`)
	w.str(string(v.DataFreshness.Overall))
	w.raw(`,"sources":`)
	writeArray(w, v.DataFreshness.Sources, (*jsonWriter).object)
	w.raw(`},"trust":{"level":`)
	w.str(string(v.Trust.Level))
	w.raw(`,"notes":`)
	w.optString(v.Trust.Notes)
	w.raw(`},"redaction":{"redacted":`)
	w.value(v.Redaction.Redacted)
	w.raw(`,"fields":`)
	writeArray(w, v.Redaction.Fields, (*jsonWriter).str)
	w.raw(`},"usdNotional":`)
	if v.USDNotional == nil {
		w.raw("null")
	} else {
		w.float(*v.USDNotional)
	}
	w.raw(`,"timestamp":"`)
	w.time(v)
	w.raw(`"`)
	w.extensions(v)
	w.raw("}")
}

// extensions writes the members schemaVersion 1 leaves out when empty: mode, wouldFail
// and signature (docs/verdict-api.md#modes, docs/verdict-signing.md).
func (w *jsonWriter) extensions(v *Verdict) {
	if v.Mode != "" {
		w.raw(`,"mode":`)
		w.str(string(v.Mode))
	}
	if len(v.WouldFail) > 0 {
		w.raw(`,"wouldFail":`)
		writeArray(w, v.WouldFail, (*jsonWriter).check)
	}
	if v.Signature != nil {
		w.raw(`,"signature":`)
		w.b = v.Signature.AppendJSON(w.b)
	}
}

// time writes v.Timestamp as time.Time's MarshalJSON writes it, without its quotes.
func (w *jsonWriter) time(v *Verdict) {
	b, err := v.Timestamp.AppendText(w.b)
	if err != nil {
		if w.err == nil {
			_, w.err = v.Timestamp.MarshalJSON()
		}
		return
	}
	w.b = b
}

func (w *jsonWriter) check(c Check) {
	w.raw(`{"checkId":`)
	w.str(string(c.CheckID))
	w.raw(`,"status":`)
	w.str(string(c.Status))
	w.raw(`,"code":`)
	if c.Code == nil {
		w.raw("null")
	} else {
		w.str(string(*c.Code))
	}
	w.raw(`,"humanReason":`)
	w.str(c.HumanReason)
	w.raw(`,"triggeringPolicyField":`)
	w.optString(c.TriggeringPolicyField)
	w.raw("}")
}

// optString writes *s, or null when s is nil.
func (w *jsonWriter) optString(s *string) {
	if s == nil {
		w.raw("null")
		return
	}
	w.str(*s)
}
