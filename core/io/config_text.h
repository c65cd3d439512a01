// Whole-text checks of a config (before and after YAML parsing) and the helpers its messages use.
#pragma once
#include <yaml-cpp/yaml.h>

#include <string>

namespace trainer::cfg {

// "name:line:col" of a YAML mark.
std::string at_mark(const std::string& name, const YAML::Mark& m);
// Before parsing: a control byte means this is no YAML text (ConfigError at its line:col).
void check_text(const std::string& text, const std::string& name);
// After a syntax error at `error_line`: a tab in the indentation up to it is the likely cause.
void explain_tabs(const std::string& text, const std::string& name, int error_line);
// After parsing: repeated keys and quoted values that do not end on their line.
void check_node(const YAML::Node& n, const std::string& text, const std::string& name);

}  // namespace trainer::cfg
