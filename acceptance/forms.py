"""HTML input for the acceptance pages: a diagnostic upload (the server page) and a burn-in group action."""

from __future__ import annotations

from django import forms


class DiagUploadForm(forms.Form):
    file = forms.FileField(label="dcgmi diag -j output", help_text="The JSON dcgmi printed (a banner line is fine)")
    level = forms.TypedChoiceField(choices=[("", "Read from the tests"), ("1", "1"), ("2", "2"), ("3", "3"),
                                            ("4", "4")], coerce=int, empty_value=None, required=False,
                                   label="Level (-r)")

    def clean_file(self):  # type: ignore[no-untyped-def]
        upload = self.cleaned_data["file"]
        if upload.size > 20 * 1024 * 1024:
            raise forms.ValidationError("The file is larger than 20 MB: is it a dcgmi diag document?")
        return upload


class BurnInActionForm(forms.Form):
    action = forms.ChoiceField(choices=[("start", "Start burn-in"), ("complete", "Move passed GPUs to service")])
    reason = forms.CharField(max_length=500, required=False)
