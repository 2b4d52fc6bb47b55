//! The conformance suite on the template backend.

hal_tests::conformance_suite!(template, hal_template_backend::TemplateBackend::new());
