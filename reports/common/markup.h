// One document model, two printers: a report is built once as headings, paragraphs,
// lists, tables and images, then printed as Markdown (renders on GitHub, images linked
// relatively) and as self-contained HTML (images embedded, no external URL).
// Tables come from one field list: each Field names a column and how to print a cell;
// columns whose value is the same in every row are hidden and said once under the table,
// so a table shows what varies and not forty copies of "adamw".
#pragma once

#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace sweep::reports {

enum class Align { kLeft, kRight };

struct Table {
  std::vector<std::string> headers;
  std::vector<Align> align;
  std::vector<std::vector<std::string>> rows;
  // Columns hidden because every row had this value: (header, value).
  std::vector<std::pair<std::string, std::string>> fixed;
};

// A column: header, the cell for one item, alignment, and whether to show it even when
// it does not vary (key columns such as the batch).
template <class T>
struct Field {
  std::string header;
  std::function<std::string(const T&)> cell;
  Align align = Align::kLeft;
  bool keep = false;
};

// Hides the columns that do not vary (unless kept) and records them in Table::fixed.
Table make_table(std::vector<std::string> headers, std::vector<Align> align,
                 const std::vector<bool>& keep, std::vector<std::vector<std::string>> rows);

template <class T>
Table make_table(const std::vector<Field<T>>& fields, const std::vector<T>& items) {
  std::vector<std::string> headers;
  std::vector<Align> align;
  std::vector<bool> keep;
  for (const auto& f : fields) {
    headers.push_back(f.header);
    align.push_back(f.align);
    keep.push_back(f.keep);
  }
  std::vector<std::vector<std::string>> rows;
  for (const auto& item : items) {
    auto& row = rows.emplace_back();
    for (const auto& f : fields) row.push_back(f.cell(item));
  }
  return make_table(std::move(headers), std::move(align), keep, std::move(rows));
}

// An image drawn into the output directory as <stem>.svg and <stem>.png.
struct Image {
  std::string stem;
  std::string alt;
};

class Document {
 public:
  void heading(int level, std::string text);
  void paragraph(std::string text);
  void list(std::vector<std::string> items);
  void table(Table table);
  void image(Image image);
  // Code shown as written (```language fenced in Markdown, <pre><code> in HTML): Python to paste.
  void code(std::string language, std::string text);
  // A block that opens folded (<details>, `summary` its one line; Markdown keeps the same tags,
  // which GitHub renders folded), or a named <section id="..."> (HTML only), closed by end().
  void begin_details(std::string summary);
  void begin_section(std::string id);
  void end();

  // Markdown for GitHub: images as ![alt](stem.svg), relative to the file.
  std::string markdown() const;
  // One HTML file: the PNGs are read from `image_dir` and embedded as data URIs.
  std::string html(const std::string& title, const std::string& image_dir) const;

 private:
  enum class Kind { kHeading, kParagraph, kList, kTable, kImage, kCode, kDetails, kSection, kEnd };
  struct Block {
    Kind kind;
    int level = 0;
    std::vector<std::string> text;  // heading/paragraph: one; list: the items; code: language, text
    Table table;
    Image image;
  };
  std::vector<Block> blocks_;
  std::vector<Kind> open_;  // begin_details/begin_section not yet ended
};

std::string markdown_table(const Table& table);
std::string html_table(const Table& table);
std::string base64(const std::string& bytes);

}  // namespace sweep::reports
