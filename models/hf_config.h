// Models from Hugging Face config.json files: the catalogue's published ones (models/catalogue/,
// built into the binary) and any file a user names. One parser for both, as transformers'
// AutoConfig reads them: `architectures` picks the model class, the class's config fields (with
// transformers 5.23's defaults where a file leaves one out) set its shape.
#pragma once

#include <string>
#include <vector>

#include "models/zoo.h"

namespace sweep::models {

// The architectures a config.json may name (its architectures[0]).
const std::vector<std::string>& supported_architectures();

// The spec of the model a config.json describes. `name` is what names it in configs and rows
// (a catalogue name, or the path as given); `file` is where `text` came from, for messages.
// Throws UserError (file, line, field, hint) for a file that is not JSON, an architecture not
// modelled or a field out of range.
ModelSpec spec_from_config_json(const std::string& name, const std::string& hf_id,
                                const std::string& text, const std::string& file);

// The catalogue: each published config.json shipped in models/catalogue/<org>/<name>/, by its
// Hugging Face id, in the order of the folder's names.
struct CatalogueFile {
  std::string hf_id;  // "Qwen/Qwen2.5-0.5B"
  std::string json;   // the file's text
};
const std::vector<CatalogueFile>& catalogue_files();

// The zoo name of a catalogue model: its Hugging Face name, lower case ("qwen2.5-0.5b").
std::string catalogue_name(const std::string& hf_id);

// Whether `name` means a file rather than a model name: it ends in ".json".
bool names_config_file(const std::string& name);

}  // namespace sweep::models
