package agent

import "github.com/sandboxd/sandboxd/runtime/transfer"

// execd error codes (reference §2.1); those of file transfers are
// transfer's, the one vocabulary of uploads and downloads.
const (
	codeInvalidRequest      = "INVALID_REQUEST_BODY"
	codeMissingQuery        = transfer.CodeMissingQuery
	codeRuntimeError        = transfer.CodeRuntimeError
	codeInvalidFile         = transfer.CodeInvalidFile
	codeInvalidFileContent  = transfer.CodeInvalidFileContent
	codeInvalidFileMetadata = transfer.CodeInvalidFileMetadata
	codeFileNotFound        = transfer.CodeFileNotFound
	codeNotSupported        = "NOT_SUPPORTED"
	codeContextNotFound     = "CONTEXT_NOT_FOUND"
)
